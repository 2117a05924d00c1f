"""Verdicts on published findings from paired per-seed measurements.

A finding says that quantity A exceeds quantity B (or falls below it) in a published direction. Each
pretraining seed gives one paired difference d_k = A_k - B_k (the same seed, data order and fine-tuning seeds
on both sides), and the verdict reads the 95 % Student-t interval of the mean difference:

- reproduced: the interval excludes zero on the published side;
- contradicted: it excludes zero on the other side;
- unresolved: it contains zero, or there are fewer than two seeds.

An unresolved finding also reports how many seeds a paired t-test at 5 % (two-sided) and 80 % power would
need if the true difference were the observed one, with the observed spread (`seeds_needed`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import stats

Direction = Literal["greater", "less"]
VERDICTS = ("reproduced", "contradicted", "unresolved")
MAX_SEEDS_REPORTED = 10_000  # beyond this a power calculation says "not at this scale"


@dataclass(frozen=True)
class PairedInterval:
    mean: float
    low: float  # the 95 % interval of the mean paired difference; NaN with fewer than two pairs
    high: float
    sd: float
    n: int


def paired_interval(differences: list[float] | np.ndarray, level: float = 0.95) -> PairedInterval:
    d = np.asarray([x for x in differences if x == x], dtype=float)  # NaN pairs (a side missing) drop out
    n = len(d)
    if n == 0:
        return PairedInterval(math.nan, math.nan, math.nan, math.nan, 0)
    mean = float(d.mean())
    if n < 2:
        return PairedInterval(mean, math.nan, math.nan, math.nan, n)
    sd = float(d.std(ddof=1))
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * sd / math.sqrt(n)
    return PairedInterval(mean, mean - half, mean + half, sd, n)


def verdict(interval: PairedInterval, direction: Direction) -> str:
    """reproduced / contradicted / unresolved for a published claim that A - B is `direction` than 0."""
    if direction not in ("greater", "less"):
        raise ValueError(f"direction={direction!r}; a finding says A is 'greater' or 'less' than B")
    if interval.n < 2 or interval.low != interval.low:
        return "unresolved"
    sign = 1.0 if direction == "greater" else -1.0
    if sign * interval.low > 0 and sign * interval.high > 0:
        return "reproduced"
    if sign * interval.low < 0 and sign * interval.high < 0:
        return "contradicted"
    return "unresolved"


def seeds_needed(interval: PairedInterval, alpha: float = 0.05, power: float = 0.8) -> int | None:
    """Paired seeds for a two-sided t-test at `alpha` to detect the observed mean difference with `power`,
    given the observed spread: the smallest n with (t_{1-alpha/2, n-1} + t_{power, n-1}) * sd / sqrt(n) <=
    |mean|. None when there is no spread to extrapolate from (n < 2) or no difference at all."""
    if interval.n < 2 or not interval.sd == interval.sd or interval.mean == 0:
        return None
    if interval.sd == 0:
        return 2
    for n in range(2, MAX_SEEDS_REPORTED + 1):
        needed = (stats.t.ppf(1 - alpha / 2, n - 1) + stats.t.ppf(power, n - 1)) * interval.sd / math.sqrt(n)
        if needed <= abs(interval.mean):
            return n
    return MAX_SEEDS_REPORTED + 1
