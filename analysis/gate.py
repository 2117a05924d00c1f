"""The common learning gate of a study's findings (analysis.findings_report): every pretraining run a row reads
must be `min_below_unigram` nats below the unigram NLL of the same held-out targets (evaluate.py's likelihood) in
every seed, and, where the study registers `min_above_chance`, every side with a chance score (BLiMP accuracy)
must beat chance by that much; a row that fails is "not evidence", whichever way it points. Where the study
registers `clear_by_mc_stderrs`, a margin estimated by Monte Carlo (the any-order bound) must clear the gate by that
many of its estimate's standard errors: a margin inside the estimate's noise has not shown it passes."""

from __future__ import annotations

import math
from typing import Any

from analysis.findings import StudyRuns, chance_of, describe, values

# The keys a study's `gate:` may hold (checked by analysis.findings_report.check_registrations), all read here
GATE_KEYS = {"min_below_unigram", "min_above_chance", "clear_by_mc_stderrs"}


def gate_arm(study: dict[str, Any], arm: str) -> str:
    """The pretraining run an arm reads (an arm with from_arm fine-tunes or diagnoses another arm's run)."""
    return study["arms"][arm].get("from_arm", arm) if arm in study.get("arms", {}) else arm


def arms_read(study: dict[str, Any], finding: dict[str, Any]) -> list[str]:
    """The pretraining runs a row reads, which the gate judges; an arm with `gate: false` (static vectors: no
    likelihood to gate) is left out."""
    named = [finding[s][k] for s in ("a", "b") for k in ("arm", "relative_to") if finding[s].get(k)]
    gated = [a for a in named if study.get("arms", {}).get(a, {}).get("gate", True) is not False]
    return sorted({gate_arm(study, a) for a in gated})


def gate_values(runs: StudyRuns, arm: str) -> dict[int, tuple[float, float]]:
    """seed -> (nats below the unigram NLL of the same held-out targets, the Monte-Carlo standard error of that
    estimate: 0 for an exact likelihood) from evaluate.py's likelihood section."""
    return {seed: (float(r["likelihood"]["below_unigram"]), float(r["likelihood"].get("mc_stderr") or 0.0))
            for (a, seed), r in runs.reports.items()
            if a == arm and r.get("likelihood", {}).get("below_unigram") is not None}


def gate_row(runs: StudyRuns, study: dict[str, Any], finding: dict[str, Any], seeds: list[int]) -> dict[str, Any]:
    """The lowest common-scale margin of the row's arms, and which arm and seed fail the gate. Every seed an arm
    was pretrained with counts, not only the seeds the row could pair: a seed drops out of a pair exactly when
    a run never left its plateau (past_exit), and that run must still mark the row."""
    gate = study.get("gate")
    if not gate:
        return {"gate": math.nan, "gate_failed": False, "gate_note": ""}
    threshold = float(gate["min_below_unigram"])
    stderrs_to_clear = float(gate.get("clear_by_mc_stderrs", 0.0))
    pretrained = runs.pretraining
    lowest, failing = math.inf, []
    for arm in arms_read(study, finding):
        margins = gate_values(runs, arm)
        arm_seeds = set(seeds) | (set(pretrained.loc[pretrained["arm"] == arm, "seed"].astype(int))
                                  if not pretrained.empty else set())
        for seed in sorted(arm_seeds):
            margin, mc_stderr = margins.get(seed, (math.nan, 0.0))
            if seed not in margins:
                failing.append(f"{arm} seed {seed} has no common-scale likelihood")
            elif not (math.isfinite(margin) and margin >= threshold):  # a NaN (diverged) run has not learned
                failing.append(f"{arm} seed {seed} is {margin:.2f} nats below unigram (gate {threshold:g})")
            elif margin - stderrs_to_clear * mc_stderr < threshold:
                failing.append(f"{arm} seed {seed} is {margin:.4f} nats below unigram, within {stderrs_to_clear:g} "
                               f"Monte-Carlo standard errors ({mc_stderr:.4f}) of the gate {threshold:g}")
            if math.isfinite(margin):
                lowest = min(lowest, margin)
    failing += chance_failures(runs, finding, float(gate.get("min_above_chance", math.nan)))
    return {"gate": lowest if lowest < math.inf else math.nan, "gate_failed": bool(failing),
            "gate_note": "; ".join(failing)}


def chance_failures(runs: StudyRuns, finding: dict[str, Any], floor: float) -> list[str]:
    """Each seed where a side with a chance score (BLiMP accuracy) is less than `floor` above it: two arms at
    chance differ by noise, so a tie there would read as non-inferiority and a gap as a finding."""
    if math.isnan(floor):
        return []
    failing = []
    for side in (finding["a"], finding["b"]):
        chance = chance_of(side)
        if chance is None:
            continue
        near = {seed: value for seed, value in sorted(values(runs, side).items()) if not value >= chance + floor}
        if near:
            scores = ", ".join(f"{value:.3f}" for value in near.values())
            failing.append(f"{describe(side)} is within {floor:g} of chance {chance:g} in seeds "
                           f"{', '.join(map(str, near))} ({scores})")
    return failing


def ungated_note(study: dict[str, Any]) -> str:
    ungated = [name for name, arm in study.get("arms", {}).items() if arm.get("gate", True) is False]
    return f" Not gated (no likelihood to judge): {', '.join(ungated)}." if ungated else ""
