"""Verdicts on pre-registered claims from paired per-seed measurements, over a family of findings.

Each pretraining seed gives one paired difference d_k = A_k - B_k (same seed, data order and fine-tuning seeds
on both sides). A claim is registered before the run as one of (with D the mean of d, oriented so that the
claim's `direction` is positive):

- superiority: D > 0. Its smallest effect of interest (SESOI) only sizes the power calculation.
- non-inferiority with margin delta: D > -delta (B may be ahead by less than delta).
- equivalence with margin delta: -delta < D < delta, by two one-sided tests (TOST).

Every test is calibrated on one scale: a claim's p-value is below alpha exactly when the two-sided (1 - alpha)
Student-t interval of D lies inside the claim's region (superiority: above 0; non-inferiority: above -delta;
equivalence: inside (-delta, delta)), and the opposite claim's ("contradicted") when the interval lies inside
the region that refutes it (below 0; below -delta; wholly beyond one margin). A finding's p-value is the
smaller of the two, and Holm's step-down adjusts them over the whole family (all findings of one study). That
keeps the chance of any false "reproduced" at or below alpha whatever the other rows do; the direction of a
rejection (reproduced rather than contradicted) is read as in a two-sided test (Shaffer's directional Holm, proved
for independent rows; the null simulation in tests/test_verdicts.py measures it).

Verdicts:
- reproduced: the Holm-adjusted p-value is below alpha and the interval lies in the claim's region;
- contradicted: the same, in the refuting region;
- unresolved: neither (or fewer than two seeds);
- not evidence: an arm the row reads failed the learning gate, or its quantities do not compare across its
  checkpoints (analysis.reports.findings_report), whatever its numbers say.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import stats

from armlm.common.errors import ArmlmError

Direction = Literal["greater", "less"]
ClaimKind = Literal["superiority", "non_inferiority", "equivalence"]
CLAIM_KINDS = ("superiority", "non_inferiority", "equivalence")
VERDICTS = ("reproduced", "contradicted", "unresolved", "not evidence")
ALPHA = 0.05  # family-wise error rate of each study's findings


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


@dataclass(frozen=True)
class Claim:
    """What a finding registers: its kind, the published sign of A - B, the margin (non-inferiority and
    equivalence) and the smallest effect of interest in the metric's units (sizes the power calculation)."""

    kind: ClaimKind
    direction: Direction
    smallest_effect: float
    margin: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in CLAIM_KINDS:
            raise ArmlmError(f"claim kind {self.kind!r}; choose one of {CLAIM_KINDS}")
        if self.direction not in ("greater", "less"):
            raise ArmlmError(f"direction={self.direction!r}; a claim says A is 'greater' or 'less' than B "
                             "(for equivalence: the side a difference is reported from)")
        if not self.smallest_effect > 0:
            raise ArmlmError(f"smallest_effect={self.smallest_effect}: register a positive effect in the metric's units")
        if (self.kind == "superiority") != (self.margin == 0):
            raise ArmlmError(f"a {self.kind} claim takes {'no margin' if self.kind == 'superiority' else 'a margin > 0'}; "
                             f"got margin={self.margin}")

    @property
    def sign(self) -> float:
        return 1.0 if self.direction == "greater" else -1.0


@dataclass(frozen=True)
class ClaimTest:
    claim_p: float  # p-value of the claim (below alpha: its (1 - alpha) interval lies in the claim's region)
    refute_p: float  # p-value of the claim's refutation
    n: int

    @property
    def p(self) -> float:
        return min(self.claim_p, self.refute_p)

    @property
    def side(self) -> str:
        return "reproduced" if self.claim_p <= self.refute_p else "contradicted"


Tail = Callable[[float], float]  # threshold -> one-sided p-value


def claim_test(claim: Claim, above: Tail, below: Tail, n: int) -> ClaimTest:
    """Both one-sided tests of `claim` from one test's tails: `above(t)` the p of H0 "the (oriented) mean is at most
    t", `below(t)` of "at least t". Each p is doubled, so that it is below alpha exactly when the two-sided (1 - alpha)
    interval excludes the null (the usual 2.5 % one-sided level); equivalence is TOST against +-margin."""
    def doubled(p: float) -> float:
        return min(1.0, 2 * p)

    if claim.kind == "equivalence":
        m = claim.margin
        return ClaimTest(doubled(max(above(-m), below(m))), doubled(min(below(-m), above(m))), n)
    return ClaimTest(doubled(above(-claim.margin)), doubled(below(-claim.margin)), n)  # threshold 0 for superiority


def judge_claim(interval: PairedInterval, claim: Claim) -> ClaimTest:
    """The paired t-tests of `claim` (claim_test's calibration)."""
    if interval.n < 2:
        return ClaimTest(1.0, 1.0, interval.n)
    above, below = t_tails(claim.sign * interval.mean, interval.sd / math.sqrt(interval.n), interval.n - 1)
    return claim_test(claim, above, below, interval.n)


def t_tails(mean: float, se: float, df: float) -> tuple[Tail, Tail]:
    """The one-sided t-test p-values of an (oriented) mean with standard error `se` on `df` degrees of freedom:
    H0 "at most t" and H0 "at least t"."""
    def above(t: float) -> float:
        return (0.0 if mean > t else 1.0) if se == 0 else float(stats.t.sf((mean - t) / se, df))

    def below(t: float) -> float:
        return (0.0 if mean < t else 1.0) if se == 0 else float(stats.t.cdf((mean - t) / se, df))

    return above, below


MAX_EXACT_SIGN_FLIPS = 20  # 2^20 sign patterns; beyond, the sign-flip test is not computed


def sign_flip_test(differences: list[float] | np.ndarray, claim: Claim) -> ClaimTest | None:
    """The exact sign-flip (permutation) test of `claim` over paired seeds, beside the t-test: under the null the
    differences are symmetric about the claim's threshold, so each of the 2^n sign patterns of (d - threshold) is
    equally likely. Each one-sided p is the share of patterns whose mean is at least as extreme, the observed one
    included (doubled by claim_test). With n seeds no p can fall below 2 / 2^n (0.0625 at 5 seeds). None with fewer
    than two differences or more than MAX_EXACT_SIGN_FLIPS."""
    d = claim.sign * np.asarray([x for x in differences if x == x], dtype=float)
    n = len(d)
    if n < 2 or n > MAX_EXACT_SIGN_FLIPS:
        return None
    signs = 1 - 2 * ((np.arange(2 ** n)[:, None] >> np.arange(n)) & 1)  # every pattern of +-1, identity first

    def above(t: float) -> float:  # share of patterns with mean >= observed, about t
        return float(((signs * np.abs(d - t)).mean(axis=1) >= (d - t).mean() - 1e-12).mean())

    def below(t: float) -> float:
        return float(((signs * np.abs(d - t)).mean(axis=1) <= (d - t).mean() + 1e-12).mean())

    return claim_test(claim, above, below, n)


def holm(p_values: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values: sorted ascending, p_(i) * (m - i + 1), made monotone, capped at 1."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted, running = [1.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def verdicts(tests: list[ClaimTest], gated: list[bool], alpha: float = ALPHA, adjust: bool = True) -> list[str]:
    """One verdict per finding of a family. Holm runs over every registered finding, gated rows included (a
    gated row can only lose a rejection, which keeps the family-wise rate); `adjust=False` judges each row
    alone at alpha (what the family-wise rate is compared against)."""
    adjusted = holm([t.p for t in tests]) if adjust else [t.p for t in tests]
    out = []
    for test, p, gate_failed in zip(tests, adjusted, gated):
        if gate_failed:
            out.append("not evidence")
        elif test.n < 2 or p >= alpha:
            out.append("unresolved")
        else:
            out.append(test.side)
    return out


WITHDRAWN = "withdrawn"  # a row found after its data not to test its claim; still counted in the family's Holm
INTERIM = "interim"  # not a verdict: the absence of one until the registered seeds are read
# The rule a registration names for reading a row (item_test.decides). Since 4 December 2026 (issue 84) there is
# one: the crossed interval over seeds and items (analysis.findings.items), or the seed test alone where a row has no items.
# Studies registered earlier said `both` (the seed and item tests had to agree): they were re-judged under this rule
# (docs/findings.md, "Amendment of 4 December").
DECIDES = ("crossed",)


def diagnostic_verdicts(tests: list[ClaimTest | None], gated: list[bool], alpha: float,
                        adjust: bool = True) -> list[str | None]:
    """One test's verdicts on the rows that have it (None where a row has not), Holm over those rows: the seed test
    alone and the item test alone, printed beside the verdict so a reader sees which source limits a row."""
    judged = [i for i, t in enumerate(tests) if t is not None]
    found = verdicts([tests[i] for i in judged], [gated[i] for i in judged], alpha, adjust)  # type: ignore[misc]
    out: list[str | None] = [None] * len(tests)
    for i, verdict in zip(judged, found):
        out[i] = verdict
    return out


@dataclass(frozen=True)
class RowVerdict:
    verdict: str  # what the report reads
    deciding_verdict: str  # the deciding test's under Holm (interim included), before any withdrawal
    seed_verdict: str | None  # the seed test alone under Holm, a diagnostic
    item_verdict: str | None  # the item test alone under Holm, a diagnostic (None: no items)
    note: str  # the row's note, with what the verdict logic adds


def family_verdicts(tests: list[ClaimTest], gated: list[bool], own_seeds_to_come: list[bool], notes: list[str],
                    withdrawn: list[str | None], alpha: float = ALPHA, adjust: bool = True,
                    seed_tests: list[ClaimTest] | None = None,
                    item_tests: list[ClaimTest | None] | None = None) -> list[RowVerdict]:
    """Every row's verdict, in the one place verdicts are decided: each row's deciding test (the crossed one where it
    has items, else the seed test) under Holm over the family (verdicts); interim while a row or (under Holm, where
    each row's adjusted p depends on every row's) the family waits for registered seeds, unless a gate already
    failed at a seed that was read; a row withdrawn after its data reads "withdrawn", still counted in the family.
    The seed-only and item-only verdicts come beside it, never deciding."""
    deciding = verdicts(tests, gated, alpha, adjust)
    seed_only = diagnostic_verdicts(seed_tests or tests, gated, alpha, adjust)
    item_only = diagnostic_verdicts(item_tests or [None] * len(tests), gated, alpha, adjust)
    family_waits = any(own_seeds_to_come) if adjust else False
    out = []
    for i, verdict in enumerate(deciding):
        note = notes[i]
        if (own_seeds_to_come[i] or family_waits) and not gated[i]:
            if not own_seeds_to_come[i]:
                note = "interim: its own seeds are read, the Holm family's are not" + (f"; {note}" if note else "")
            verdict = INTERIM
        final = verdict
        if withdrawn[i]:
            final, note = WITHDRAWN, withdrawn[i]
        out.append(RowVerdict(final, verdict, seed_only[i], item_only[i], note))
    return out
