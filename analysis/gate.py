"""The common learning gate of a study's findings (analysis.findings_report): every pretraining run a row reads
must have learned, in every seed. `own_below_unigram` (issue 46) reads each arm as it is used: its own held-out
training loss (masked-token loss for an MLM, the NELBO for masked diffusion, each component of a mixture) at least
that many nats below the unigram NLL of exactly the targets that loss scored (train.py's summary). The earlier
`min_below_unigram` reads every arm on one common scale (evaluate.py's likelihood: exact for causal readers, the
any-order bound for bidirectional ones), whose looseness it then mostly measures for a bidirectional arm. And, where the study registers `min_above_chance`, every side with a chance score (BLiMP accuracy)
must beat chance by that much; a row that fails is "not evidence", whichever way it points. Where the study
registers `clear_by_mc_stderrs`, a margin estimated by Monte Carlo (the any-order bound) must clear the gate by that
many of its estimate's standard errors: a margin inside the estimate's noise has not shown it passes."""

from __future__ import annotations

import math
from typing import Any

from scipy.stats import chi2

from analysis.findings import StudyRuns, above_majority, chance_of, describe, values
from analysis.study import lowest_own_margin

# The keys a study's `gate:` may hold (checked by analysis.findings_report.check_registrations), all read here
GATE_KEYS = {"own_below_unigram", "own_share_below_unigram", "min_below_unigram", "min_above_chance",
             "min_above_majority", "clear_by_mc_stderrs", "min_discrimination"}
MARGIN_KEYS = ("own_below_unigram", "own_share_below_unigram", "min_below_unigram")  # a gate registers one


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


def own_gate_values(runs: StudyRuns, arm: str) -> dict[int, tuple[float, float]]:
    """seed -> (the arm's own held-out loss below the unigram NLL of the same targets, the lowest of a mixture's
    pooled and per-component margins; 0: a fixed validation set and corruption, no Monte-Carlo error). From the
    arm's pretraining summary, or, for an arm that reads another study's checkpoint (study=embeddings), from its
    diagnostics report, which copies that run's margins."""
    found: dict[int, tuple[float, float]] = {}
    for (name, seed), report in runs.reports.items():
        margin = lowest_own_margin((report.get("pretraining") or {}).get("own_below_unigram"))
        if name == arm and margin is not None:
            found[seed] = (float(margin), 0.0)
    table = runs.pretraining
    if not table.empty and "own_below_unigram" in table:
        rows = table[(table["arm"] == arm) & table["own_below_unigram"].notna()]
        found |= {int(s): (float(v), 0.0) for s, v in zip(rows["seed"], rows["own_below_unigram"], strict=True)}
    return found


def own_share_values(runs: StudyRuns, arm: str) -> dict[int, tuple[float, float]]:
    """seed -> the arm's own-loss margin as a share of its baseline (analysis.study.own_share), the lowest scope's."""
    table = runs.pretraining
    if table.empty or "own_share_below_unigram" not in table:
        return {}
    rows = table[(table["arm"] == arm) & table["own_share_below_unigram"].notna()]
    return {int(s): (float(v), 0.0) for s, v in zip(rows["seed"], rows["own_share_below_unigram"], strict=True)}


def in_nats(margin: float) -> str:
    return f"{margin:.2f} nats below unigram"


def as_share(margin: float) -> str:
    return f"{margin:.1%} of its baseline below it"


# (gate key, where the margins come from, what a run lacking one is missing, how a failing margin is named, and
# how a margin reads)
MARGIN_GATES = (("own_below_unigram", own_gate_values, "own held-out loss", " by its own loss", in_nats),
                ("own_share_below_unigram", own_share_values, "own held-out loss and its baseline", " by its own loss",
                 as_share),
                ("min_below_unigram", gate_values, "common-scale likelihood", "", in_nats))


def gate_row(runs: StudyRuns, study: dict[str, Any], finding: dict[str, Any], seeds: list[int]) -> dict[str, Any]:
    """The lowest margin of the row's arms (the first registered of MARGIN_GATES), and which arm and seed fail the
    gate. Every seed an arm was pretrained with counts, not only the seeds the row could pair: a seed drops out of
    a pair exactly when a run never left its plateau (past_exit), and that run must still mark the row."""
    gate = study.get("gate")
    if not gate:
        return {"gate": math.nan, "gate_failed": False, "gate_note": ""}
    stderrs_to_clear = float(gate.get("clear_by_mc_stderrs", 0.0))
    pretrained = runs.pretraining
    lowest, failing, reported = math.inf, [], None
    for key, read_margins, lacking, by, reads in MARGIN_GATES:
        if key not in gate:
            continue
        threshold = float(gate[key])
        for arm in arms_read(study, finding):
            margins = read_margins(runs, arm)
            arm_seeds = set(seeds) | (set(pretrained.loc[pretrained["arm"] == arm, "seed"].astype(int))
                                      if not pretrained.empty else set())
            for seed in sorted(arm_seeds):
                margin, mc_stderr = margins.get(seed, (math.nan, 0.0))
                if seed not in margins:
                    failing.append(f"{arm} seed {seed} has no {lacking}")
                elif not (math.isfinite(margin) and margin >= threshold):  # a NaN (diverged) run has not learned
                    failing.append(f"{arm} seed {seed} is {reads(margin)}{by} (gate {threshold:g})")
                elif margin - stderrs_to_clear * mc_stderr < threshold:
                    failing.append(f"{arm} seed {seed} is {margin:.4f} nats below unigram, within {stderrs_to_clear:g} "
                                   f"Monte-Carlo standard errors ({mc_stderr:.4f}) of the gate {threshold:g}")
                if math.isfinite(margin) and reported in (None, key):
                    reported, lowest = key, min(lowest, margin)
    failing += chance_failures(runs, finding, float(gate.get("min_above_chance", math.nan)))
    failing += majority_failures(runs, finding, float(gate.get("min_above_majority", math.nan)))
    failing += discrimination_failures(runs, finding, gate.get("min_discrimination"))
    failing = list(dict.fromkeys(failing))  # a check passes its one value as both sides: each failure once
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


def majority_failures(runs: StudyRuns, finding: dict[str, Any], floor: float) -> list[str]:
    """Each seed where a fine-tuned side is less than `floor` above its task's majority-class baseline: two arms at a
    task's floor tie by construction, so an equivalence there would be read from models that learned nothing."""
    if math.isnan(floor):
        return []
    failing = []
    for side in (finding["a"], finding["b"]):
        margins = above_majority(runs, side)
        near = {seed: m for seed, m in (margins or {}).items() if not m >= floor}
        if near:
            failing.append(f"{describe(side)} is within {floor:g} of the majority baseline in seeds "
                           f"{', '.join(map(str, near))} ({', '.join(f'{m:+.3f}' for m in near.values())} above it)")
    return failing


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


def discrimination_failures(runs: StudyRuns, finding: dict[str, Any], rule: dict[str, Any] | None) -> list[str]:
    """Each seed where a BLiMP side's preferences are not told apart from coin flips (`rule`: {alpha: a},
    coin_flip_p_value >= a over the side's paradigms): two arms that guess differ by noise. The rule replaces
    the chance floor (min_above_chance), which read accuracy near 0.5 as guessing."""
    if not rule:
        return []
    alpha, failing = float(rule["alpha"]), []
    for side in (finding["a"], finding["b"]):
        if "zeroshot" not in side or side.get("relative_to"):
            continue
        method = side["zeroshot"]["method"]
        guessing = {seed: p for (arm, seed), report in sorted(runs.zeroshot.items()) if arm == side["arm"]
                    for p in [coin_flip_p_value(paradigm_counts(report, method))] if not p < alpha}
        if guessing:
            ps = ", ".join(f"{p:.2g}" for p in guessing.values())
            failing.append(f"{describe(side)} is not told apart from coin-flip preferences (chi-square p >= {alpha:g}) "
                           f"in seeds {', '.join(map(str, guessing))} (p {ps})")
    return failing


def ungated_note(study: dict[str, Any]) -> str:
    ungated = [name for name, arm in study.get("arms", {}).items() if arm.get("gate", True) is False]
    return f" Not gated (no likelihood to judge): {', '.join(ungated)}." if ungated else ""


def gate_description(study: dict[str, Any]) -> str:
    """What the study's registered gate asks, in the report's words."""
    gate = study["gate"]
    if "own_share_below_unigram" in gate:
        text = (f"Gate: every arm a row reads must have learned its own objective: its own held-out training loss at "
                f"least {float(gate['own_share_below_unigram']):.0%} below its context-free baseline (the unigram NLL "
                "of "
                "the same targets for a loss over tokens; for replaced-token detection, the binary entropy of its "
                "labels), in every seed; the gate column is the lowest such share.")
    elif "own_below_unigram" in gate:
        text = (f"Gate: every arm a row reads must have learned its own objective: its own held-out training loss "
                f"(masked-token loss for an MLM, the NELBO for masked diffusion, each component of a mixture) at least "
                f"{float(gate['own_below_unigram']):g} nats below the unigram NLL of the same targets, in every seed; "
                "the gate column is the lowest such margin.")
    else:
        text = (f"Gate: every arm a row reads must be at least {float(gate['min_below_unigram']):g} nats below the "
                "unigram NLL of the same held-out targets (evaluate.py's likelihood: exact for causal readers, the "
                "any-order bound for bidirectional ones) in every seed; the gate column is the lowest such margin.")
    if gate.get("min_discrimination"):
        text += (f" A BLiMP side's per-paradigm preferences must differ from coin flips (chi-square over its "
                 f"paradigms, p < {float(gate['min_discrimination']['alpha']):g}) in every seed.")
    if "min_above_majority" in gate:
        text += (f" A fine-tuned side must score at least {float(gate['min_above_majority']):g} above its task's "
                 "majority-class baseline (a mean over tasks for a mean score) in every seed.")
    if "min_above_chance" in gate:
        text += (f" A side with a chance score (BLiMP: 0.5) must be at least {float(gate['min_above_chance']):g} "
                 "above it in every seed.")
    if gate.get("clear_by_mc_stderrs"):
        text += (f" A margin estimated by Monte Carlo (the bound) must clear the gate by "
                 f"{float(gate['clear_by_mc_stderrs']):g} standard errors of its estimate.")
    return text + ungated_note(study)
