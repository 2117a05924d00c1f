"""What a curves study's points say: where each BLiMP line passes the release's models, the paired differences
between lines at each budget, and how a difference moves from the smallest budget to the largest.

A one-seed point has no interval over seeds; its BLiMP cell carries the interval over its pairs (the bootstrap in
zeroshot.json), so a crossing is read three ways: the mean above the model, the mean above it at every larger budget
too, and the interval's low end above it (over seeds where a point has several, else over its pairs).
"""

from __future__ import annotations

import itertools

import pandas as pd

from armlm.analysis.tables import study_tables as S

BLIMP = "BLiMP"
STRICT_WORDS = 100_000_000  # BabyLM's strict track
# An H100 SXM's dense bf16 datasheet peak. No run reaches a peak (a small model's steps are bound by kernel launches),
# so hours at it are a lower bound on a GPU run, never an estimate of one.
H100_PEAK_FLOPS = 989e12


def crossings(points: pd.DataFrame, published: pd.DataFrame) -> pd.DataFrame:
    """For each BLiMP line and each of the release's models (overall): the first budget whose mean is above it, the
    budget from which every larger one stays above, and the first whose interval's low end is above (NaN: none)."""
    blimp = points[points["measure"] == BLIMP]
    reference = published[published["level"] == "overall"].set_index("arm")["mean"]
    rows = []
    for line, part in blimp.groupby("line"):
        part = part.sort_values("words")
        for model, score in reference.items():
            above = part["mean"] > score
            stays = above[::-1].cummin()[::-1]  # above here and at every larger budget
            rows.append({"line": line, "model": model, "score": score, "largest": part["words"].max(),
                         "first_above": part.loc[above, "words"].min(),
                         "stays_above": part.loc[stays, "words"].min(),
                         "clear_above": part.loc[part["low"] > score, "words"].min()})
    return pd.DataFrame(rows, columns=["line", "model", "score", "largest", "first_above", "stays_above",
                                       "clear_above"])


def crossing_table(table: pd.DataFrame) -> list[str]:
    def where(words: float, largest: float, through: bool = False) -> str:
        if words != words:
            return f"not up to {largest / 1e6:.2f}M"
        return f"{words / 1e6:.2f}M" + (f" (through {largest / 1e6:.2f}M)" if through else "")
    rows = [[r.line, f"{r.model} ({r.score:.3f})", where(r.first_above, r.largest),
             where(r.stays_above, r.largest, through=True), where(r.clear_above, r.largest)] for r in table.itertuples()]
    return ["Each line's mean over the seeds a point has; the interval is over seeds where a point has several, "
            "else the bootstrap over its pairs.", "", *S.markdown_rows(
                ["line", "release model (overall)", "first budget above it",
                 "above from (every larger budget scored too)", "interval clear of it from"], rows)] if rows else []


def direction(mean: float, ci95: float, n: int, above: str, below: str) -> str:
    """What a paired difference (or its change) says: `above` or `below` where its 95 % t interval over seeds
    excludes 0; nothing about its sign at one seed or where the interval spans 0. Descriptive either way: the
    curves register no finding, so no interval here is corrected for the family."""
    if n < 2 or ci95 != ci95:
        return "one seed: direction unresolved"
    if abs(mean) <= ci95:
        return "unresolved (the interval spans 0)"
    return above if mean > 0 else below


def paired(runs: pd.DataFrame, budgets: pd.DataFrame, measure: str) -> pd.DataFrame:
    """The measure's runs with each arm's words (rounded to a thousand, the key two lines share at one budget)."""
    return runs[runs["measure"] == measure].join(budgets.groupby("arm")["words"].mean().round(-3), on="arm")


def differences(part: pd.DataFrame, a: str, b: str) -> pd.DataFrame:
    """a minus b per budget and seed, over the seeds both lines have at that budget."""
    both = part[part["line"] == a].merge(part[part["line"] == b], on=["words", "seed"], suffixes=("_a", "_b"))
    return both.assign(difference=both["value_a"] - both["value_b"])[["words", "seed", "difference"]]


def leads(runs: pd.DataFrame, budgets: pd.DataFrame, measure: str) -> pd.DataFrame:
    """Every pair of lines at every budget they share: a minus b, paired by seed (mean, ci95, n over seeds)."""
    part = paired(runs, budgets, measure)
    rows = [{"a": a, "b": b, "words": words, **S.mean_ci(group["difference"]).to_dict()}
            for a, b in itertools.combinations(sorted(part["line"].unique()), 2)
            for words, group in differences(part, a, b).groupby("words")]
    return pd.DataFrame(rows, columns=["a", "b", "words", "mean", "ci95", "n"])


def lead_changes(runs: pd.DataFrame, budgets: pd.DataFrame, measure: str) -> pd.DataFrame:
    """Every pair of lines: (a − b at the largest budget both have) minus (a − b at the smallest), paired by seed over
    the seeds that have both differences: whether a's lead grows (> 0), shrinks or holds along the curve."""
    part = paired(runs, budgets, measure)
    rows = []
    for a, b in itertools.combinations(sorted(part["line"].unique()), 2):
        diff = differences(part, a, b)
        if diff["words"].nunique() < 2:
            continue
        first, last = diff["words"].min(), diff["words"].max()
        ends = diff.pivot_table(index="seed", columns="words", values="difference")[[first, last]].dropna()
        rows.append({"a": a, "b": b, "from_words": first, "to_words": last,
                     **S.mean_ci(ends[last] - ends[first]).to_dict()})
    return pd.DataFrame(rows, columns=["a", "b", "from_words", "to_words", "mean", "ci95", "n"])


def extrapolations(points: pd.DataFrame, budgets: pd.DataFrame, per_word: str, words: float = STRICT_WORDS,
                   peak_flops: float = H100_PEAK_FLOPS) -> pd.DataFrame:
    """Each line of the `per_word` measure (wall seconds per 1,000 words) at its largest budget, the steadiest
    reading of its rate: that rate (mean over the point's seeds), its training FLOPs per word, and what `words`
    words would take at them: hours on this machine, and hours at `peak_flops` (a bound)."""
    cost = points[points["measure"] == per_word]
    largest = cost.loc[cost.groupby("line")["words"].idxmax()]
    flops_per_word = (budgets["flops"] / budgets["words"]).groupby(budgets["arm"]).mean()
    per_word_flops = largest["arm"].map(flops_per_word)
    return pd.DataFrame({"line": largest["line"], "at_words": largest["words"], "n": largest["n"],
                         "seconds_per_kword": largest["mean"], "hours_here": largest["mean"] * words / 1000 / 3600,
                         "flops_per_word": per_word_flops,
                         "hours_at_peak": per_word_flops * words / peak_flops / 3600}).reset_index(drop=True)
