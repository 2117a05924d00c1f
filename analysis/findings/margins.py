"""How far each arm's runs are below their context-free baseline, per seed: the numbers the learning gate
(analysis.findings.gate) judges. Each reader returns seed -> (margin, the Monte-Carlo standard error of its estimate)."""

from __future__ import annotations

from armlm.analysis.tables.study_runs import StudyRuns
from armlm.analysis.tables.study_tables import lowest_own_margin

Margins = dict[int, tuple[float, float]]  # seed -> (margin, the Monte-Carlo standard error of its estimate)


def common_scale_margins(runs: StudyRuns, arm: str) -> Margins:
    """From `armlm evaluate`'s likelihood section: nats below the unigram NLL of the same held-out targets, and the
    Monte-Carlo standard error of that estimate (0 for an exact likelihood)."""
    return {seed: (float(r["likelihood"]["below_unigram"]), float(r["likelihood"].get("mc_stderr") or 0.0))
            for (a, seed), r in runs.reports.items()
            if a == arm and r.get("likelihood", {}).get("below_unigram") is not None}


def pretraining_margins(runs: StudyRuns, arm: str, column: str) -> Margins:
    """A margin column of the arm's pretraining table (analysis.tables.study_tables.pretraining_runs): a fixed validation set and
    corruption, so no Monte-Carlo error."""
    table = runs.pretraining
    if table.empty or column not in table:
        return {}
    rows = table[(table["arm"] == arm) & table[column].notna()]
    return {int(s): (float(v), 0.0) for s, v in zip(rows["seed"], rows[column], strict=True)}


def own_margins(runs: StudyRuns, arm: str) -> Margins:
    """The arm's own held-out loss below the unigram NLL of the same targets, the lowest of a mixture's pooled and
    per-component margins. From the arm's pretraining summary, or, for an arm that reads another study's checkpoint
    (study=embeddings), from its diagnostics report, which copies that run's margins."""
    found: Margins = {}
    for (name, seed), report in runs.reports.items():
        margin = lowest_own_margin((report.get("pretraining") or {}).get("own_below_unigram"))
        if name == arm and margin is not None:
            found[seed] = (float(margin), 0.0)
    return found | pretraining_margins(runs, arm, "own_below_unigram")


def own_share_margins(runs: StudyRuns, arm: str) -> Margins:
    """The arm's own-loss margin as a share of its baseline (analysis.tables.study_tables.own_share), the lowest scope's."""
    return pretraining_margins(runs, arm, "own_share_below_unigram")
