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
from typing import Any

from armlm.analysis.findings.items import SideItems
from armlm.analysis.findings.quantities import QUANTITIES, Quantity
from armlm.analysis.tables.study_runs import NotComparable, StudyRuns, scores
from armlm.common.errors import ArmlmError


def quantity_of(side: dict[str, Any]) -> Quantity:
    """The one quantity a side names."""
    named = [q for name, q in QUANTITIES.items() if name in side]
    if len(named) != 1 or "arm" not in side:
        raise ArmlmError(f"a finding's side needs an arm and exactly one of {tuple(QUANTITIES)}; got {sorted(side)}")
    return named[0]


def plain_sides(side: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """A side as its own plain side and the plain side it is taken relative to (None where it is not)."""
    reference = side.get("relative_to")
    plain = {k: v for k, v in side.items() if k != "relative_to"}
    if not reference:
        return plain, None
    changed = dict(reference) if isinstance(reference, Mapping) else {"arm": reference}
    if set(changed) - set(plain) - {"arm"}:
        raise ArmlmError(f"relative_to={dict(changed)} changes keys the side does not have ({sorted(plain)})")
    return plain, {**plain, **changed}


def arms_of(side: dict[str, Any]) -> list[str]:
    """Every arm a side reads: its own, and its reference's where that is another arm."""
    own, reference = plain_sides(side)
    return [own["arm"]] + ([reference["arm"]] if reference and reference["arm"] != own["arm"] else [])


def values(runs: StudyRuns, side: dict[str, Any]) -> dict[int, float]:
    """seed -> the side's value for every seed that has it (its change from `relative_to`'s, if given)."""
    own_side, reference_side = plain_sides(side)
    if reference_side is not None:
        own, reference = values(runs, own_side), values(runs, reference_side)
        return {seed: own[seed] - reference[seed] for seed in own.keys() & reference.keys()}
    return quantity_of(side).values(runs, side)


def describe(side: dict[str, Any]) -> str:
    own, reference = plain_sides(side)
    if reference is None:
        return f"{own['arm']}: {quantity_of(own).detail(own)}"
    if [k for k in reference if reference[k] != own.get(k)] == ["arm"]:
        return f"{own['arm']}: {quantity_of(own).detail(own)} minus {reference['arm']}'s"  # another arm, same reading
    return f"{describe(own)} minus {describe(reference)}"


def above_majority(runs: StudyRuns, side: dict[str, Any]) -> dict[int, float] | None:
    """seed -> how far a fine-tuned side scores above the majority-class baseline of its task(s) (a mean over tasks
    for finetune_mean); None for a side that is not a fine-tuned score (or is a difference between arms)."""
    reads = None if plain_sides(side)[1] else quantity_of(side).majority_reads(side)
    if reads is None:
        return None
    margins = [{seed: value - scores(runs, side["arm"], *read, column="baseline")[seed]
                for seed, value in scores(runs, side["arm"], *read).items()} for read in reads]
    seeds = set.intersection(*(set(m) for m in margins))
    return {seed: sum(m[seed] for m in margins) / len(margins) for seed in sorted(seeds)}


def side_items(runs: StudyRuns, side: dict[str, Any], seeds: list[int]) -> SideItems | None:
    """The side's items for the item bootstrap, every seed's, as signed readings (its own, less its reference's where
    it is relative to one); None where a reading's quantity has none, or a seed lacks them."""
    if not seeds:
        return None
    own, reference = plain_sides(side)
    readings = [(1.0, own)] + ([(-1.0, reference)] if reference else [])
    found = [(sign, quantity_of(plain).items(runs, plain, seeds)) for sign, plain in readings]
    return None if any(items is None for _, items in found) else found  # type: ignore[misc]


def likelihood_blocks(runs: StudyRuns, side: dict[str, Any]) -> dict[int, str]:
    """seed -> the fingerprint of the held-out blocks a likelihood side was scored on."""
    return {seed: report["likelihood"]["blocks_fingerprint"] for (arm, seed), report in runs.reports.items()
            if arm == side["arm"] and "likelihood" in report}


def measure(runs: StudyRuns, a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Both sides' per-seed values and the seeds they share. Sides of a quantity read on held-out blocks (the
    likelihood) compare only on the same blocks (NotComparable otherwise)."""
    a_values, b_values = values(runs, a), values(runs, b)
    if all(quantity_of(side).same_blocks for side in (a, b)):
        blocks_a, blocks_b = likelihood_blocks(runs, a), likelihood_blocks(runs, b)
        differing = sorted(s for s in blocks_a.keys() & blocks_b.keys() if blocks_a[s] != blocks_b[s]
                           or blocks_a[s] is None)  # None: the report's writer did not record its blocks
        if differing:
            raise NotComparable(f"seeds {differing} were scored on different held-out blocks (or ones their report "
                                "does not record); diagnose both arms on the same corpus, block size and blocks")
    return {"seeds": sorted(a_values.keys() & b_values.keys()), "a_values": a_values, "b_values": b_values}
