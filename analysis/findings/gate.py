"""The common learning gate of a study's findings (analysis.reports.findings_report): every pretraining run a row reads
must have learned, in every seed, and every side must clear the gate's floors; a row that fails is "not evidence",
whichever way it points. A study's `gate:` names rules of GATE_RULES, each one object that checks its registered
value, finds the failures of a row and says in the report's words what it asks.

One margin rule is registered per gate (MARGIN_RULES, each with its words): an arm's own held-out training loss below
the unigram NLL of the targets it scored, in nats or as a share of that baseline, or (for a published checkpoint
without a training summary) `armlm evaluate`'s common-scale likelihood below it. Where a study registers
`clear_by_mc_stderrs`, a margin estimated by Monte Carlo (the any-order bound) must clear the gate by that many of
its estimate's standard errors: a margin inside the estimate's noise has not shown it passes."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from scipy.stats import chi2

from armlm.analysis.findings.margins import Margins, common_scale_margins, own_margins, own_share_margins
from armlm.analysis.findings.measures import above_majority, describe
from armlm.analysis.findings.sides import Side
from armlm.analysis.tables.study_runs import StudyRuns
from armlm.common.errors import ArmlmError

Sides = tuple[Side, Side]  # a row's A and B (a check's one value, twice)


@dataclass(frozen=True)
class GatedArm:
    """What the gate reads of a study's arm: the pretraining run it reads (an arm with `from_arm` fine-tunes or
    diagnoses another arm's run), and whether it is gated (`gate: false`: static vectors, no likelihood to gate)."""

    reads: str
    gated: bool = True

    @staticmethod
    def parse(name: str, raw: Any) -> GatedArm:
        if not isinstance(raw, Mapping):
            raise ArmlmError(f"arm {name}={raw!r}; an arm is a mapping of its settings, e.g. {{pretrain: [...]}}")
        return GatedArm(str(raw.get("from_arm") or name), raw.get("gate", True) is not False)


def arms_read(arms: Mapping[str, GatedArm], sides: Sides) -> list[str]:
    """The pretraining runs a row reads, which the gate judges; an ungated arm is left out (an arm the study does not
    name reads its own run: a family judged from its rows alone)."""
    named = [arms.get(a, GatedArm(a)) for side in sides for a in side.arms()]
    return sorted({arm.reads for arm in named if arm.gated})


@dataclass(frozen=True)
class GateContext:
    runs: StudyRuns
    arms: Mapping[str, GatedArm]  # the study's arms
    gate: Gate  # the study's registered gate
    sides: Sides
    seeds: list[int]


class GateRule:
    """One key of a study's `gate:`: its registered value, the failures of a row under it, and its words."""

    key: str  # its key in `gate:`

    def parse(self, value: Any) -> float:
        """The registered value as the number the rule reads."""
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = math.nan
        if not number >= 0:
            raise ArmlmError(f"study.gate.{self.key}={value}; give a number >= 0")
        return number

    def failures(self, context: GateContext, value: float) -> list[str]:
        return []  # a modifier of the margin rules (clear_by_mc_stderrs) fails nothing of its own

    def describe(self, value: float) -> str:
        raise NotImplementedError


@dataclass(frozen=True)
class MarginRule(GateRule):
    """Every arm a row reads is at least `value` below its baseline, in every seed it was pretrained with."""

    key: str
    margins: Callable[[StudyRuns, str], Margins]
    lacking: str  # what a run without a margin is missing
    by: str  # how a failing margin is named
    reads: Callable[[float], str]  # how a margin reads
    words: str  # what the report says it asks, with {value}

    def per_seed(self, context: GateContext) -> list[tuple[str, int, tuple[float, float] | None]]:
        """(arm, seed, its margin and standard error, None: none) for every seed each arm the row reads was
        pretrained with, not only the seeds the row could pair: a seed drops out of a pair exactly when a run never
        left its plateau (past_exit), and that run must still mark the row."""
        pretrained, out = context.runs.pretraining, []
        for arm in arms_read(context.arms, context.sides):
            margins = self.margins(context.runs, arm)
            arm_seeds = set(context.seeds) | (set(pretrained.loc[pretrained["arm"] == arm, "seed"].astype(int))
                                              if not pretrained.empty else set())
            out += [(arm, seed, margins.get(seed)) for seed in sorted(arm_seeds)]
        return out

    def failures(self, context: GateContext, value: float) -> list[str]:
        threshold, failing = value, []
        stderrs = context.gate.value(ClearByStderrs.key)
        for arm, seed, found in self.per_seed(context):
            margin, mc_stderr = found or (math.nan, 0.0)
            if found is None:
                failing.append(f"{arm} seed {seed} has no {self.lacking}")
            elif not (math.isfinite(margin) and margin >= threshold):  # a NaN (diverged) run has not learned
                failing.append(f"{arm} seed {seed} is {self.reads(margin)}{self.by} (gate {threshold:g})")
            elif margin - stderrs * mc_stderr < threshold:
                failing.append(f"{arm} seed {seed} is {margin:.4f} nats below unigram, within {stderrs:g} "
                               f"Monte-Carlo standard errors ({mc_stderr:.4f}) of the gate {threshold:g}")
        return failing

    def lowest(self, context: GateContext) -> float:
        """The lowest finite margin of those the rule judged, the gate column (NaN: none)."""
        found = [f[0] for _, _, f in self.per_seed(context) if f is not None and math.isfinite(f[0])]
        return min(found) if found else math.nan

    def describe(self, value: float) -> str:
        return self.words.format(value=value)


class ClearByStderrs(GateRule):
    key = "clear_by_mc_stderrs"

    def describe(self, value: float) -> str:
        return (f" A margin estimated by Monte Carlo (the bound) must clear the gate by {value:g} standard "
                "errors of its estimate.") if value else ""


class AboveMajority(GateRule):
    """A fine-tuned side scores at least `value` above its task's majority-class baseline in every seed: two arms at
    a task's floor tie by construction, so an equivalence there would be read from models that learned nothing."""

    key = "min_above_majority"

    def failures(self, context: GateContext, value: float) -> list[str]:
        floor, failing = value, []
        for side in context.sides:
            near = {seed: m for seed, m in (above_majority(context.runs, side) or {}).items() if not m >= floor}
            if near:
                failing.append(f"{describe(side)} is within {floor:g} of the majority baseline in seeds "
                               f"{', '.join(map(str, near))} ({', '.join(f'{m:+.3f}' for m in near.values())} above it)")
        return failing

    def describe(self, value: float) -> str:
        return (f" A fine-tuned side must score at least {value:g} above its task's majority-class baseline "
                "(a mean over tasks for a mean score) in every seed.")


def paradigm_counts(report: dict[str, Any], method: str) -> list[tuple[int, int]]:
    """(pairs preferred correctly, pairs) per BLiMP paradigm scored by `method`, from a zeroshot.json report."""
    rows = report["blimp"]["results"][method]
    return [(round(float(r["accuracy"]) * int(r["pairs"])), int(r["pairs"])) for r in rows if r["level"] == "paradigm"]


def coin_flip_p_value(counts: list[tuple[int, int]]) -> float:
    """How likely per-paradigm counts at least this far from half are if every preference were a fair coin:
    Pearson's chi-square, sum over paradigms of (k - n/2)^2 / (n/4), on as many degrees of freedom as paradigms.
    It measures discrimination (systematic preferences, whichever side they favour), not accuracy: a model that
    prefers the wrong sentence of every pair of a paradigm discriminates as much as one that prefers the right."""
    if not counts:
        return math.nan
    statistic = sum((k - n / 2) ** 2 / (n / 4) for k, n in counts)
    return float(chi2.sf(statistic, len(counts)))


class Discrimination(GateRule):
    """A BLiMP side's preferences are told apart from coin flips ({alpha: a}: coin_flip_p_value < a over the side's
    paradigms) in every seed: two arms that guess differ by noise."""

    key = "min_discrimination"

    def parse(self, value: Any) -> float:
        alpha = value.get("alpha") if isinstance(value, Mapping) and set(value) == {"alpha"} else None
        if not (isinstance(alpha, int | float) and 0 < alpha < 1):
            raise ArmlmError(f"study.gate.min_discrimination={value}; give {{alpha: <in (0, 1)>}}")
        return float(alpha)

    def failures(self, context: GateContext, value: float) -> list[str]:
        alpha, failing = value, []
        for side in context.sides:
            if side.quantity != "zeroshot" or side.reference:
                continue
            method = side.spec["method"]
            guessing = {seed: p for (arm, seed), report in sorted(context.runs.zeroshot.items()) if arm == side.arm
                        for p in [coin_flip_p_value(paradigm_counts(report, method))] if not p < alpha}
            if guessing:
                ps = ", ".join(f"{p:.2g}" for p in guessing.values())
                failing.append(f"{describe(side)} is not told apart from coin-flip preferences (chi-square p >= "
                               f"{alpha:g}) in seeds {', '.join(map(str, guessing))} (p {ps})")
        return failing

    def describe(self, value: float) -> str:
        return (f" A BLiMP side's per-paradigm preferences must differ from coin flips (chi-square over its "
                f"paradigms, p < {value:g}) in every seed.")


def in_nats(margin: float) -> str:
    return f"{margin:.2f} nats below unigram"


def as_share(margin: float) -> str:
    return f"{margin:.1%} of its baseline below it"


_OWN = "Gate: every arm a row reads must have learned its own objective: its own held-out training loss "
MARGIN_RULES = (
    MarginRule("own_below_unigram", own_margins, "own held-out loss", " by its own loss", in_nats,
               _OWN + "(masked-token loss for an MLM, the NELBO for masked diffusion, each component of a mixture) at "
               "least {value:g} nats below the unigram NLL of the same targets, in every seed; the gate column is the "
               "lowest such margin."),
    MarginRule("own_share_below_unigram", own_share_margins, "own held-out loss and its baseline", " by its own loss",
               as_share, _OWN + "at least {value:.0%} below its context-free baseline (the unigram NLL of the same "
               "targets for a loss over tokens; for replaced-token detection, the binary entropy of its labels), in "
               "every seed; the gate column is the lowest such share."),
    MarginRule("min_below_unigram", common_scale_margins, "common-scale likelihood", "", in_nats,
               "Gate: every arm a row reads must be at least {value:g} nats below the unigram NLL of the same held-out "
               "targets (`armlm evaluate`'s likelihood: exact for causal readers, the any-order bound for bidirectional "
               "ones) in every seed; the gate column is the lowest such margin."))
# the report's order: the margin rule, then the floors
GATE_RULES: dict[str, GateRule] = {r.key: r for r in (*MARGIN_RULES, Discrimination(), AboveMajority(),
                                                      ClearByStderrs())}


@dataclass(frozen=True)
class Gate:
    """A study's registered gate, parsed: each rule it names with its value as a number (a margin, a floor, an
    alpha), in GATE_RULES' order, exactly one of them a margin rule."""

    rules: tuple[tuple[GateRule, float], ...]

    @staticmethod
    def parse(raw: Any) -> Gate | None:
        """A study's `gate:`, checked before any stage runs (None: no gate registered)."""
        if raw is None:
            return None
        if not isinstance(raw, Mapping):
            raise ArmlmError(f"study.gate={raw!r}; give a mapping of rules, e.g. {{own_below_unigram: 0.05}}")
        unknown = set(raw) - set(GATE_RULES)
        margins = [r.key for r in MARGIN_RULES if r.key in raw]
        if unknown or len(margins) != 1:
            others = [k for k in GATE_RULES if k not in {r.key for r in MARGIN_RULES}]
            raise ArmlmError(f"study.gate={dict(raw)}: unknown rules {sorted(unknown)}, margin rules {margins}; a "
                             f"gate names exactly one of {[r.key for r in MARGIN_RULES]} and any of {others}, or is "
                             "left out")
        return Gate(tuple((rule, rule.parse(raw[key])) for key, rule in GATE_RULES.items() if key in raw))

    @property
    def margin(self) -> MarginRule:
        return next(rule for rule, _ in self.rules if isinstance(rule, MarginRule))

    def value(self, key: str) -> float:
        """The registered value of a rule (0 where the gate does not name it)."""
        return next((value for rule, value in self.rules if rule.key == key), 0.0)


def gate_row(runs: StudyRuns, arms: Mapping[str, GatedArm], gate: Gate | None, sides: Sides,
             seeds: list[int]) -> dict[str, Any]:
    """The lowest margin of the row's arms under the gate's margin rule, and which arm and seed fail any rule."""
    if not gate:
        return {"gate": math.nan, "gate_failed": False, "gate_note": ""}
    context = GateContext(runs, arms, gate, sides, seeds)
    failing = [f for rule, value in gate.rules for f in rule.failures(context, value)]
    failing = list(dict.fromkeys(failing))  # a check passes its one value as both sides: each failure once
    return {"gate": gate.margin.lowest(context), "gate_failed": bool(failing), "gate_note": "; ".join(failing)}


def gate_description(arms: Mapping[str, GatedArm], gate: Gate) -> str:
    """What the study's registered gate asks, in the report's words: each rule's, in GATE_RULES' order."""
    ungated = [name for name, arm in arms.items() if not arm.gated]
    return ("".join(rule.describe(value) for rule, value in gate.rules)
            + (f" Not gated (no likelihood to judge): {', '.join(ungated)}." if ungated else ""))
