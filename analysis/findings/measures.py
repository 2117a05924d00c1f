"""What a study's findings measure: each compares a quantity A with a quantity B, measured once per
pretraining seed and paired across the two sides (analysis.reports.findings_report judges the family).

A finding (in the study config, `study.findings.<id>`) reads:

    claim: MLM fine-tuned bidirectionally beats AR fine-tuned causally on CoNLL-2003
    anchor: BERT (Devlin et al. 2019), Table 5: ...
    a: {arm: mlm, finetune: conll2003-full, metric: f1}
    b: {arm: ar, finetune: conll2003-full, metric: f1}
    test: {kind: superiority, direction: greater, smallest_effect: 0.02}   # registered (findings_report)

A side names its arm and one quantity of analysis.findings.quantities.QUANTITIES (each class's docstring gives its
grammar); its value for a seed comes from that seed's runs.

A side may add `relative_to: <arm>`: its value is then the quantity's change from that arm to its own, per seed
(e.g. the validation NLL at 16 epochs minus at 4). `relative_to: {<key>: <value>, ...}` names the reference by the
keys it changes instead (`{finetune: conll2003-causal}`: the same arm's bidirectional score minus its causal one), so
a row can compare two such differences (an interaction).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from armlm.analysis.findings.items import SideItems
from armlm.analysis.findings.quantities import QUANTITIES, Quantity
from armlm.analysis.findings.sides import Side
from armlm.analysis.tables.study_runs import NotComparable, StudyRuns, scores
from armlm.common.errors import ArmlmError


def parse_side(raw: Any, where: str) -> Side:
    """A side as a study config writes it, checked against its quantity (the one QUANTITIES key it names, that
    quantity's spec grammar and options) and parsed with its `relative_to` reference."""
    if not isinstance(raw, Mapping):
        raise ArmlmError(f"{where}={raw!r}; a side is {{arm: <arm>, <one of {tuple(QUANTITIES)}>: <spec>, ...}}")
    named = [name for name in QUANTITIES if name in raw]
    if len(named) != 1 or not isinstance(raw.get("arm"), str):
        raise ArmlmError(f"{where}: a side needs an arm and exactly one of {tuple(QUANTITIES)}; got {sorted(raw)}")
    quantity = QUANTITIES[named[0]]
    allowed = {"arm", quantity.name, "relative_to", *quantity.options}
    unknown, missing = set(raw) - allowed, set(quantity.required_options) - set(raw)
    if unknown or missing:
        raise ArmlmError(f"{where}: {quantity.name} side with unknown keys {sorted(unknown)}, missing "
                         f"{sorted(missing)}; it takes {sorted(allowed)}")
    problem = quantity.spec_problem(raw[quantity.name])
    if problem:
        raise ArmlmError(f"{where}: {problem}")
    epoch = raw.get("epoch")
    if epoch is not None and not (isinstance(epoch, int) and not isinstance(epoch, bool) and epoch >= 1):
        raise ArmlmError(f"{where}: epoch={epoch!r}; give the epoch (1, 2, ...) whose score the side reads")
    plain = {k: v for k, v in raw.items() if k != "relative_to"}
    side = Side(plain["arm"], quantity.name, plain[quantity.name], plain.get("metric"), plain.get("split"), epoch)
    reference = raw.get("relative_to")
    if not reference:
        return side
    changed = dict(reference) if isinstance(reference, Mapping) else {"arm": reference}
    if set(changed) - set(plain) - {"arm"}:
        raise ArmlmError(f"{where}: relative_to={changed} changes keys the side does not have ({sorted(plain)})")
    return replace(side, reference=parse_side({**plain, **changed}, f"{where}.relative_to"))


def quantity_of(side: Side) -> Quantity:
    return QUANTITIES[side.quantity]


def values(runs: StudyRuns, side: Side) -> dict[int, float]:
    """seed -> the side's value for every seed that has it (its change from `relative_to`'s, if given)."""
    if side.reference is not None:
        own, reference = values(runs, side.plain), values(runs, side.reference)
        return {seed: own[seed] - reference[seed] for seed in own.keys() & reference.keys()}
    return quantity_of(side).values(runs, side)


def describe(side: Side) -> str:
    own, reference = side.plain, side.reference
    if reference is None:
        return f"{own.arm}: {quantity_of(own).detail(own)}"
    if own.differs_only_in_arm(reference):
        return f"{own.arm}: {quantity_of(own).detail(own)} minus {reference.arm}'s"  # another arm, same reading
    return f"{describe(own)} minus {describe(reference)}"


def above_majority(runs: StudyRuns, side: Side) -> dict[int, float] | None:
    """seed -> how far a fine-tuned side scores above the majority-class baseline of its task(s) (a mean over tasks
    for finetune_mean); None for a side that is not a fine-tuned score (or is a difference between arms)."""
    reads = None if side.reference else quantity_of(side).majority_reads(side)
    if reads is None:
        return None
    margins = [{seed: value - scores(runs, side.arm, *read, column="baseline")[seed]
                for seed, value in scores(runs, side.arm, *read).items()} for read in reads]
    seeds = set.intersection(*(set(m) for m in margins))
    return {seed: sum(m[seed] for m in margins) / len(margins) for seed in sorted(seeds)}


def side_items(runs: StudyRuns, side: Side, seeds: list[int]) -> SideItems | None:
    """The side's items for the item bootstrap, every seed's, as signed readings (its own, less its reference's where
    it is relative to one); None where a reading's quantity has none, or a seed lacks them."""
    if not seeds:
        return None
    readings = [(1.0, side.plain)] + ([(-1.0, side.reference)] if side.reference else [])
    found = [(sign, quantity_of(plain).items(runs, plain, seeds)) for sign, plain in readings]
    return None if any(items is None for _, items in found) else found  # type: ignore[misc]


def likelihood_blocks(runs: StudyRuns, side: Side) -> dict[int, str]:
    """seed -> the fingerprint of the held-out blocks a likelihood side was scored on."""
    return {seed: report["likelihood"]["blocks_fingerprint"] for (arm, seed), report in runs.reports.items()
            if arm == side.arm and "likelihood" in report}


@dataclass(frozen=True)
class Measured:
    """Both sides' per-seed values, and why they could not be compared (empty: they could)."""

    a_values: dict[int, float]
    b_values: dict[int, float]
    not_comparable: str = ""

    @property
    def seeds(self) -> list[int]:
        return sorted(self.a_values.keys() & self.b_values.keys())


def measure(runs: StudyRuns, a: Side, b: Side) -> Measured:
    """Both sides' per-seed values. Sides of a quantity read on held-out blocks (the likelihood) compare only on the
    same blocks."""
    try:
        a_values, b_values = values(runs, a), values(runs, b)
    except NotComparable as err:
        return Measured({}, {}, f"not comparable: {err}")
    if all(quantity_of(side).same_blocks for side in (a, b)):
        blocks_a, blocks_b = likelihood_blocks(runs, a), likelihood_blocks(runs, b)
        differing = sorted(s for s in blocks_a.keys() & blocks_b.keys() if blocks_a[s] != blocks_b[s]
                           or blocks_a[s] is None)  # None: the report's writer did not record its blocks
        if differing:
            return Measured({}, {}, f"not comparable: seeds {differing} were scored on different held-out blocks (or "
                            "ones their report does not record); diagnose both arms on the same corpus, block size "
                            "and blocks")
    return Measured(a_values, b_values)
