"""What a study's findings measure: each compares a quantity A with a quantity B, measured once per
pretraining seed and paired across the two sides (analysis.findings_report judges the family).

A finding (in the study config, `study.findings.<id>`) reads:

    claim: MLM fine-tuned bidirectionally beats AR fine-tuned causally on CoNLL-2003
    anchor: BERT (Devlin et al. 2019), Table 5: ...
    a: {arm: mlm, finetune: conll2003-full, metric: f1}
    b: {arm: ar, finetune: conll2003-full, metric: f1}
    test: {kind: superiority, direction: greater, smallest_effect: 0.02}   # registered (findings_report)

A side names its arm and one quantity of analysis.quantities.QUANTITIES (each class's docstring gives its
grammar); its value for a seed comes from that seed's runs.

A side may add `relative_to: <arm>`: its value is then the quantity's change from that arm to its own, per seed
(e.g. the validation NLL at 16 epochs minus at 4).
"""

from __future__ import annotations

from typing import Any

from analysis.quantities import QUANTITIES, Quantity
from analysis.study_runs import NotComparable, StudyRuns, scores
from common.errors import ArmlmError


def quantity_of(side: dict[str, Any]) -> Quantity:
    """The one quantity a side names."""
    named = [q for name, q in QUANTITIES.items() if name in side]
    if len(named) != 1 or "arm" not in side:
        raise ArmlmError(f"a finding's side needs an arm and exactly one of {tuple(QUANTITIES)}; got {sorted(side)}")
    return named[0]


def values(runs: StudyRuns, side: dict[str, Any]) -> dict[int, float]:
    """seed -> the side's value for every seed that has it (its change from `relative_to`'s, if given)."""
    if side.get("relative_to"):
        plain = {k: v for k, v in side.items() if k != "relative_to"}
        own, reference = values(runs, plain), values(runs, {**plain, "arm": side["relative_to"]})
        return {seed: own[seed] - reference[seed] for seed in own.keys() & reference.keys()}
    return quantity_of(side).values(runs, side)


def describe(side: dict[str, Any]) -> str:
    since = f" minus {side['relative_to']}'s" if side.get("relative_to") else ""
    return f"{side['arm']}: {quantity_of(side).detail(side)}{since}"


def above_majority(runs: StudyRuns, side: dict[str, Any]) -> dict[int, float] | None:
    """seed -> how far a fine-tuned side scores above the majority-class baseline of its task(s) (a mean over tasks
    for finetune_mean); None for a side that is not a fine-tuned score (or is a difference between arms)."""
    reads = None if side.get("relative_to") else quantity_of(side).majority_reads(side)
    if reads is None:
        return None
    margins = [{seed: value - scores(runs, side["arm"], *read, column="baseline")[seed]
                for seed, value in scores(runs, side["arm"], *read).items()} for read in reads]
    seeds = set.intersection(*(set(m) for m in margins))
    return {seed: sum(m[seed] for m in margins) / len(margins) for seed in sorted(seeds)}


def side_items(runs: StudyRuns, side: dict[str, Any], seeds: list[int]) -> dict | None:
    """seed -> the side's items for the item test, for every seed; None where its quantity has none (or the side is
    a difference between arms), or a seed lacks them."""
    return None if side.get("relative_to") or not seeds else quantity_of(side).items(runs, side, seeds)


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
