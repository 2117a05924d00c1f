"""Power where a verdict is read (analysis.findings.power): the paired t-test's seeds, and the crossed test's seeds or items."""

import math

import numpy as np
import pytest
from scipy import stats

from armlm.analysis.findings.power import crossed_needs, crossed_power, one_sided_power, sd_upper_limit, seeds_for
from armlm.analysis.findings.verdicts import Claim

SUPERIORITY = Claim("superiority", "greater", smallest_effect=0.02)


def test_power_is_the_noncentral_t_and_matches_simulation():
    rng = np.random.default_rng(1)
    n, effect, sd = 5, 0.8, 1.0
    d = rng.normal(effect, sd, size=(40_000, n))
    t = d.mean(1) / (d.std(1, ddof=1) / math.sqrt(n))
    simulated = float((t > stats.t.ppf(0.975, n - 1)).mean())
    assert one_sided_power(effect, sd, n, alpha=0.05) == pytest.approx(simulated, abs=0.01)
    claim = Claim("superiority", "greater", smallest_effect=0.5)
    needed = seeds_for(claim, sd=1.0, alpha=0.05)
    assert one_sided_power(0.5, 1.0, needed, 0.05) >= 0.8 > one_sided_power(0.5, 1.0, needed - 1, 0.05)
    # equivalence asks each one-sided test for 90 % (a bound on TOST's power), so it needs more seeds
    assert seeds_for(Claim("equivalence", "greater", 0.5, margin=0.5), 1.0, 0.05) > needed
    assert seeds_for(claim, float("nan"), 0.05) is None


def test_the_sd_upper_limit_covers_the_true_sd_80_percent_of_the_time():
    rng = np.random.default_rng(2)
    samples = rng.normal(0, 1.0, size=(20_000, 3))
    upper = np.array([sd_upper_limit(float(s.std(ddof=1)), 3) for s in samples[:4000]])
    assert float((upper >= 1.0).mean()) == pytest.approx(0.8, abs=0.02)
    assert sd_upper_limit(1.0, 3) == pytest.approx(math.sqrt(2 / stats.chi2.ppf(0.2, 2)))


def test_the_crossed_power_without_items_is_the_paired_t_tests():
    for n in (3, 8, 20):
        assert crossed_power(0.02, 0.03 ** 2, 0.0, n, 100, 0.05) == pytest.approx(one_sided_power(0.02, 0.03, n, 0.05))


@pytest.mark.parametrize(("effect", "seed_sd", "item_sd"), [(0.02, 0.02, 0.1), (0.03, 0.03, 0.02)])  # items, seeds lead
def test_the_crossed_power_matches_simulation_of_the_crossed_t_test(effect, seed_sd, item_sd):
    """Seeds x items with known components: the share of simulated crossed t-tests (the components estimated, the
    interval's df rule) that reject, against crossed_power from the true components."""
    rng = np.random.default_rng(8)
    seeds, items, studies = 6, 40, 20_000
    seed_means = effect + rng.normal(0, seed_sd, (studies, seeds))
    item_means = rng.normal(0, item_sd, (studies, items))
    v_seed = seed_means.var(axis=1, ddof=1) / seeds
    v_item = item_means.var(axis=1, ddof=1) / items
    mean = seed_means.mean(axis=1) + item_means.mean(axis=1)
    satterthwaite = (v_seed + v_item) ** 2 / (v_seed ** 2 / (seeds - 1) + v_item ** 2 / (items - 1))
    df = np.where(v_seed >= v_item, seeds - 1, satterthwaite)  # the crossed interval's rule (ItemInterval.df)
    rejected = mean / np.sqrt(v_seed + v_item) > stats.t.ppf(0.975, df)
    assert crossed_power(effect, seed_sd ** 2, item_sd ** 2, seeds, items, 0.05) == pytest.approx(rejected.mean(),
                                                                                                  abs=0.02)


def test_more_seeds_cannot_resolve_a_row_its_items_hold_back():
    # the items alone give the mean an sd of 0.012: at 0.02, no number of seeds reaches 80 % power at alpha 0.05 / 6
    seeds_needed, factor = crossed_needs(SUPERIORITY, seed_variance=0.004 ** 2, item_variance=0.012 ** 2,
                                         interaction=0.0, seeds=8, items=36, alpha=0.05 / 6)
    assert seeds_needed is None and factor is not None and factor > 1
    item_part = 0.012 ** 2 * 36
    assert crossed_power(0.02, 0.004 ** 2 * 8, item_part, 8, factor * 36, 0.05 / 6) >= 0.8
    assert crossed_power(0.02, 0.004 ** 2 * 8, item_part, 8, (factor - 1) * 36, 0.05 / 6) < 0.8


def test_a_row_its_seeds_hold_back_needs_seeds_and_its_items_as_they_are():
    seeds_needed, factor = crossed_needs(SUPERIORITY, seed_variance=0.02 ** 2 / 8, item_variance=0.002 ** 2,
                                         interaction=0.0, seeds=8, items=216,
                                         alpha=0.05 / 6)
    assert factor == 1 and seeds_needed > 8

    def power(n: int) -> float:
        return crossed_power(0.02, 0.02 ** 2, 0.002 ** 2 * 216, n, 216, 0.05 / 6)

    assert power(seeds_needed) >= 0.8 > power(seeds_needed - 1)
    assert crossed_needs(SUPERIORITY, 0.0, 0.0, math.nan, 1, 10, 0.05) == (None, None)


def test_a_row_both_sources_hold_back_needs_items_and_far_more_seeds():
    # at 3 seeds the seed component alone (sd of the mean 0.01) already exceeds what 0.02 needs at alpha 0.05 / 6
    seeds_needed, factor = crossed_needs(SUPERIORITY, seed_variance=0.01 ** 2, item_variance=0.012 ** 2,
                                         interaction=0.0, seeds=3, items=36, alpha=0.05 / 6)
    assert seeds_needed is None and factor is not None and factor < -1  # negated: with far more seeds as well


def test_an_item_variance_that_is_seed_by_item_interaction_shrinks_with_more_seeds():
    # the same item-only variance as above, but nine tenths of it the interaction: more seeds now resolve the row
    held, _ = crossed_needs(SUPERIORITY, seed_variance=0.004 ** 2, item_variance=0.012 ** 2, interaction=0.0,
                            seeds=8, items=36, alpha=0.05 / 6)
    freed, factor = crossed_needs(SUPERIORITY, seed_variance=0.004 ** 2 + 0.9 * 0.012 ** 2, item_variance=0.012 ** 2,
                                  interaction=0.9 * 0.012 ** 2, seeds=8, items=36, alpha=0.05 / 6)
    assert held is None and freed is not None and freed > 8 and factor == 1
