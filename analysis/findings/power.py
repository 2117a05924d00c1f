"""Power where a verdict is read: what would resolve an unresolved row, in the unit that decides it.

A row judged on seeds alone needs seeds (seeds_for, a paired t-test). A row judged on its crossed interval
(analysis.findings.items) has two components, seeds and items: more seeds shrink only the first, so where the item component
alone keeps the interval from the claim's region, no number of seeds resolves it, and the report says so and how
many times the items it would take instead (crossed_needs).
"""

from __future__ import annotations

import math

from scipy import stats

from armlm.analysis.findings.verdicts import Claim

POWER = 0.8
MAX_SEEDS_REPORTED = 10_000  # beyond this a power calculation says "not at this scale"
MAX_ITEM_FACTOR = 100  # beyond this many times the items, "not at this scale"


def one_sided_power(effect: float, sd: float, n: int, alpha: float) -> float:
    """Exact power of a one-sided paired t-test at level alpha / 2 (the two-sided calibration above) when the
    true mean lies `effect` beyond the null: the noncentral t's tail past the critical value."""
    if n < 2:
        return 0.0
    if sd == 0:
        return 1.0 if effect > 0 else 0.0
    critical = stats.t.ppf(1 - alpha / 2, n - 1)
    return float(stats.nct.sf(critical, n - 1, effect * math.sqrt(n) / sd))


def seeds_for(claim: Claim, sd: float, alpha: float, power: float = POWER) -> int | None:
    """Seeds a paired test needs to reach `power` for the registered claim at level alpha:
    superiority, a true difference of the smallest effect; non-inferiority, a true difference of 0 (distance
    `margin` from the null); equivalence, a true difference of 0 shown inside +-margin by both one-sided
    tests (each side at power 1 - (1 - power) / 2, a Bonferroni bound on TOST's power). None without an sd."""
    if not sd == sd:
        return None
    effect, per_side = _target(claim, power)
    if one_sided_power(effect, sd, MAX_SEEDS_REPORTED, alpha) < per_side:
        return MAX_SEEDS_REPORTED + 1
    low, high = 1, MAX_SEEDS_REPORTED  # power grows with n: bisect for the smallest n that reaches it
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if one_sided_power(effect, sd, middle, alpha) >= per_side else (middle, high)
    return high


def sd_upper_limit(sd: float, n: int, confidence: float = 0.8) -> float:
    """The upper `confidence` limit of a standard deviation estimated from n values (chi-square, n - 1 df):
    with 3 seeds the observed sd can be well below the true one, so power is also read at this limit."""
    if n < 2 or not sd == sd:
        return math.nan
    return sd * math.sqrt((n - 1) / stats.chi2.ppf(1 - confidence, n - 1))


def _target(claim: Claim, power: float) -> tuple[float, float]:
    """The true distance from the null a claim's power is read at, and the power each one-sided test needs."""
    effect = claim.smallest_effect if claim.kind == "superiority" else claim.margin
    return effect, power if claim.kind != "equivalence" else 1 - (1 - power) / 2


def crossed_power(effect: float, seed_part: float, item_part: float, seeds: int, items: float, alpha: float) -> float:
    """Power of the crossed t-test at level alpha / 2 per side with `seeds` seeds and `items` item units, from the
    variance one seed (`seed_part`) and one item unit (`item_part`) add to the mean difference, with the degrees of
    freedom the crossed interval uses (analysis.findings.items.ItemInterval.df)."""
    if seeds < 2:
        return 0.0
    a, b = seed_part / seeds, item_part / items
    if a + b == 0:
        return 1.0 if effect > 0 else 0.0
    df = float(seeds - 1) if a >= b else (a + b) ** 2 / (a ** 2 / (seeds - 1) + b ** 2 / max(1.0, items - 1))
    critical = stats.t.ppf(1 - alpha / 2, df)
    return float(stats.nct.sf(critical, df, effect / math.sqrt(a + b)))


def crossed_needs(claim: Claim, seed_variance: float, item_variance: float, interaction: float, seeds: int,
                  items: int, alpha: float, power: float = POWER) -> tuple[int | None, int | None]:
    """(seeds, item factor) that would resolve a crossed row at `power`: the seeds it needs with its items as they
    are, or None where the item component alone prevents it, and then how many times its items it needs at these
    seeds, or, negated, with far more seeds as well where these seeds also fall short (MAX_ITEM_FACTOR + 1: more
    than that). The components are variances of the mean at `seeds` and `items` (analysis.findings.items.ItemInterval): the
    seed one holds the seed x item interaction, which more seeds shrink too, so the item part more seeds cannot
    shrink is the item variance less it."""
    if not (seeds > 1 and seed_variance == seed_variance and item_variance == item_variance):
        return None, None
    seed_part = seed_variance * seeds
    item_part = max(0.0, item_variance - (interaction if interaction == interaction else 0.0)) * items
    effect, per_side = _target(claim, power)

    def enough(n: int, factor: float) -> bool:
        return crossed_power(effect, seed_part, item_part, n, factor * items, alpha) >= per_side

    if not enough(MAX_SEEDS_REPORTED, 1):
        factor = next((k for k in range(1, MAX_ITEM_FACTOR + 1) if enough(seeds, k)), None)
        return None, factor if factor is not None else -next(  # negative: with far more seeds as well
            (k for k in range(1, MAX_ITEM_FACTOR + 1) if enough(MAX_SEEDS_REPORTED, k)), MAX_ITEM_FACTOR + 1)
    low, high = 1, MAX_SEEDS_REPORTED
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if enough(middle, 1) else (middle, high)
    return high, 1
