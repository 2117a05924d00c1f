import math

import numpy as np
import pytest
from scipy import stats

from analysis.verdicts import paired_interval, seeds_needed, verdict


def test_interval_is_the_student_t_interval_of_the_paired_differences():
    d = [0.8, 1.3, 0.2, 0.9]
    interval = paired_interval(d)
    low, high = stats.t.interval(0.95, len(d) - 1, loc=np.mean(d), scale=stats.sem(d))
    assert (interval.low, interval.high) == pytest.approx((low, high))
    assert interval.n == 4 and interval.mean == pytest.approx(0.8)


def test_reproduced_only_when_the_interval_excludes_zero_on_the_published_side():
    clear = paired_interval([1.0, 1.2, 0.9])
    assert verdict(clear, "greater") == "reproduced"
    assert verdict(clear, "less") == "contradicted"
    flipped = paired_interval([-1.0, -1.2, -0.9])
    assert verdict(flipped, "less") == "reproduced" and verdict(flipped, "greater") == "contradicted"


def test_an_interval_that_straddles_zero_is_unresolved_whatever_the_mean():
    straddling = paired_interval([2.0, -0.5, 1.5])  # mean > 0 but the interval reaches below 0
    assert straddling.mean > 0 and straddling.low < 0 < straddling.high
    assert verdict(straddling, "greater") == "unresolved" and verdict(straddling, "less") == "unresolved"


def test_one_seed_or_a_missing_side_is_unresolved():
    assert verdict(paired_interval([5.0]), "greater") == "unresolved"
    assert verdict(paired_interval([5.0, float("nan")]), "greater") == "unresolved"  # the NaN pair drops out
    assert paired_interval([]).n == 0 and verdict(paired_interval([]), "less") == "unresolved"
    with pytest.raises(ValueError, match="direction"):
        verdict(paired_interval([1.0, 2.0]), "bigger")


def test_seeds_needed_is_the_smallest_n_with_enough_power():
    interval = paired_interval([0.3, -0.1, 0.4, 0.0])
    n = seeds_needed(interval)
    assert n is not None and n > interval.n

    def detectable(k: int) -> bool:
        return (stats.t.ppf(0.975, k - 1) + stats.t.ppf(0.8, k - 1)) * interval.sd / math.sqrt(k) <= abs(interval.mean)

    assert detectable(n) and not detectable(n - 1)
    assert seeds_needed(paired_interval([1.0])) is None  # no spread to extrapolate from
    assert seeds_needed(paired_interval([5.0, 5.1, 4.9])) == 2  # already far beyond the noise
