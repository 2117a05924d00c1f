"""A curves study's report: each objective's measures against its pretraining budget in words (BabyLM's unit), one
figure per measure with the objectives as lines on a log axis, and a table (report/curves.md and curves.csv).

An arm is one point of one curve: its runs' objective (summary.json) names the line and their words seen (the
passes over the train split times its whitespace words) place it. Points may differ in seeds and budgets: each cell
is the mean over the seeds that point has, with a 95 % t interval and n. The study's standard report is written too.

    armlm report curves <study root>
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure  # figures without pyplot: no backend, no global state

from armlm.analysis.reports.blimp_report import blimp_runs, labelled_reports, one_release
from armlm.analysis.reports.registry import report_main
from armlm.analysis.reports.study_plots import save_figure
from armlm.analysis.reports.study_report import with_common_scale, write_report
from armlm.analysis.tables import study_tables as S
from armlm.analysis.tables.curves_reading import (
    BLIMP,
    STRICT_WORDS,
    crossing_table,
    crossings,
    direction,
    extrapolations,
    lead_changes,
    leads,
)
from armlm.common.atomic import atomic_write_text, read_artefact
from armlm.common.errors import ArmlmError

# measure -> what its figure's y axis says
COMMON_SCALE = {"heldout_nll": "held-out NLL per token (exact, or the any-order bound)",
                "heldout_below_unigram": "nats below the unigram NLL of the same targets"}
# The learning gate's quantity (summary.json's own_below_unigram): the arm's own held-out loss below the unigram NLL
# of the targets it scored, the smallest of its parts (a hybrid's masked and causal) as the findings gate reads it.
GATE = "pretraining: own loss below unigram"
PER_WORD = "pretraining seconds per 1,000 words, trunk share included"


def run_budgets(root: Path) -> pd.DataFrame:
    """arm, seed, objective, words and tokens seen of every pretraining run."""
    rows = []
    for path in sorted(root.glob("*/seed*/pretrain/summary.json")):
        arm, seed = S.arm_and_seed(path, root)
        summary = read_artefact(path)
        if summary.get("words_seen") is None:
            raise ArmlmError(f"{path} has no words_seen (its token cache was built before the cache counted words): "
                             "delete that corpus's cache folder and rerun the arm, so its budget can be placed")
        branch = summary["branch_from"] or {}  # a cooldown branch: the trunk's arm (its run folder's) and tokens
        rows.append({"arm": arm, "seed": seed, "objective": summary["objective"], "words": summary["words_seen"],
                     "tokens": summary["tokens_seen"], "flops": summary["flops_seen"],
                     "own_below_unigram": S.lowest_own_margin(summary["own_below_unigram"]),
                     "trunk": Path(branch["trunk"]).parts[-3] if branch else None, "trunk_tokens": branch.get("tokens")})
    if not rows:
        raise ArmlmError(f"{root} holds no finished pretraining run (<arm>/seed<k>/pretrain/summary.json)")
    return pd.DataFrame(rows)


def curve_runs(root: Path, budgets: pd.DataFrame, zeroshot: list[tuple[str, int, dict]],
               seconds: pd.DataFrame) -> pd.DataFrame:
    """One row per run and measure: arm, seed, measure, line (the objective, or objective · method for BLiMP), value.
    `budgets` is run_budgets(root), `zeroshot` labelled_reports([root]), `seconds` S.stage_seconds(root) of the
    finished stages (a running stage's seconds are a part of its cost): each read once by write_curves."""
    objective = budgets.set_index(["arm", "seed"])["objective"]
    rows = []
    common = with_common_scale(budgets[["arm", "seed"]], S.stage_reports(root, S.DIAGNOSTICS))
    for measure in COMMON_SCALE:
        rows += [{"arm": r.arm, "seed": r.seed, "measure": measure, "value": getattr(r, measure)}
                 for r in common.itertuples()]
    rows += [{"arm": r.arm, "seed": r.seed, "measure": GATE, "value": r.own_below_unigram}
             for r in budgets.itertuples()]
    blimp = blimp_runs(zeroshot)
    rows += [{"arm": r.arm, "seed": r.seed, "measure": BLIMP, "method": r.method, "value": r.accuracy,
              "pairs_low": r.ci_low, "pairs_high": r.ci_high} for r in blimp[blimp["level"] == "overall"].itertuples()]
    finetune_runs = S.finetuning_runs(root)
    finetuning = S.per_checkpoint(finetune_runs)
    if not finetuning.empty:
        kept = finetuning[finetuning["metric"] == finetuning["task"].map(S.primary_metrics(finetune_runs))]
        rows += [{"arm": r.arm, "seed": r.seed, "measure": f"{r.task}-{r.variant} {r.split} {r.metric}",
                  "value": r.value} for r in kept.itertuples()]
    rows += [{"arm": arm, "seed": seed, "measure": f"minutes {kind}", "value": part["seconds"].sum(min_count=1) / 60}
             for (arm, seed, kind), part in seconds.groupby(["arm", "seed", "kind"])]
    rows += point_costs(budgets, seconds)
    runs = pd.DataFrame(rows).dropna(subset=["value"]).reindex(columns=[
        "arm", "seed", "measure", "method", "value", "pairs_low", "pairs_high"])
    runs["objective"] = [objective.get((a, s)) for a, s in zip(runs["arm"], runs["seed"], strict=True)]
    runs = runs.dropna(subset=["objective"])
    method = runs["method"] if "method" in runs else pd.Series(None, index=runs.index)
    runs["line"] = [o if m != m or m is None else f"{o} · {m}" for o, m in zip(runs["objective"], method, strict=True)]
    return runs.drop(columns=["method"], errors="ignore")


def point_costs(budgets: pd.DataFrame, seconds: pd.DataFrame) -> list[dict]:
    """What each point's pretraining cost: its own stage's minutes, plus, for a cooldown branch, the trunk's minutes
    times the share of the trunk's tokens it branched at (training.branches); and that per 1,000 words seen."""
    pretrain = seconds[seconds["kind"] == "pretrain"].groupby(["arm", "seed"])["seconds"].sum(min_count=1)
    tokens_seen = budgets.set_index(["arm", "seed"])["tokens"]
    rows = []
    for r in budgets.itertuples():
        own = pretrain.get((r.arm, r.seed), float("nan"))
        share = 0.0 if pd.isna(r.trunk) else pretrain.get((r.trunk, r.seed), float("nan")) * r.trunk_tokens / \
            tokens_seen.get((r.trunk, r.seed), float("nan"))
        rows.append({"arm": r.arm, "seed": r.seed, "measure": "minutes pretrain, trunk share included",
                     "value": (own + share) / 60})
        rows.append({"arm": r.arm, "seed": r.seed, "measure": PER_WORD, "value": (own + share) / r.words * 1000})
    return rows


def seed_costs(seconds: pd.DataFrame) -> pd.DataFrame:
    """Wall minutes of every stage kind per seed, summed over the arms (each stage counted once: a trunk's
    pretraining is not shared out here), with the seed's total; NaN where a stage kept no time."""
    if seconds.empty:
        return pd.DataFrame(columns=["seed", "total"])
    minutes = seconds.pivot_table(index="seed", columns="kind", values="seconds", dropna=False,
                                  aggfunc=lambda part: part.sum(min_count=len(part))) / 60
    untimed = seconds["seconds"].isna().groupby(seconds["seed"]).any()
    return minutes.assign(total=minutes.sum(axis=1).mask(untimed)).reset_index()


def curve_points(runs: pd.DataFrame, budgets: pd.DataFrame) -> pd.DataFrame:
    """Mean, ci95 and n over each point's seeds, with the point's words and tokens (means over its runs), and an
    interval: mean ± ci95 over seeds, or, for a one-seed BLiMP point, the bootstrap interval over its pairs."""
    place = budgets.groupby("arm")[["words", "tokens"]].mean()
    points = S.over_seeds(runs, ["measure", "line", "arm"], ["value"]).drop(columns="quantity")
    points = points.join(place, on="arm").sort_values(["measure", "line", "words"]).reset_index(drop=True)
    pairs = runs.groupby(["measure", "line", "arm"])[["pairs_low", "pairs_high"]].mean()
    points = points.join(pairs, on=["measure", "line", "arm"])
    one = points["n"] == 1
    points["low"] = (points["mean"] - points["ci95"]).where(~one, points["pairs_low"])
    points["high"] = (points["mean"] + points["ci95"]).where(~one, points["pairs_high"])
    points = points.drop(columns=["pairs_low", "pairs_high"])
    clash = points.groupby(["measure", "line", points["words"].round(-3)])["arm"].nunique()
    if (clash > 1).any():
        measure, line, words = clash[clash > 1].index[0]
        arms = sorted(points[(points["line"] == line) & (points["words"].round(-3) == words)]["arm"].unique())
        raise ArmlmError(f"arms {arms} both put {line} at {words:,.0f} words: a curve has one arm per budget; give "
                         "them different budgets or objectives")
    return points


def _cell(r) -> str:
    if r.n == 1 and r.low == r.low:  # a one-seed BLiMP point: the interval over its pairs
        return f"{r.mean:.3f} [{r.low:.3f}, {r.high:.3f}]"
    return S.cell(r.mean, r.ci95)


def markdown(points: pd.DataFrame, lead_tables: dict[str, pd.DataFrame], change_tables: dict[str, pd.DataFrame],
             crossing_lines: list[str], costs: pd.DataFrame, extrapolated: pd.DataFrame, figures: list[str],
             root: Path, running: pd.DataFrame | None = None) -> str:
    parts = [f"# Curves: {root}", "",
             "Each point is one arm: its objective's line, placed at the words its runs saw (passes over the train "
             "split times its whitespace words, BabyLM's unit) and the input tokens that makes. Cells: mean ± 95 % "
             "t interval over the point's seeds (n); a one-seed BLiMP cell gives the 95 % bootstrap interval over "
             "its pairs in brackets, other one-seed cells none. BLiMP scores the study's pairs of each shared "
             "paradigm (blimp.max_pairs); the release's models are scored on every pair of the same paradigms. "
             "heldout_nll reads each objective as it scores (Objective.scoring): AR and the hybrid exactly, by the "
             "chain rule under causal attention (for the hybrid, its causal reading only), an MLM by the any-order "
             "upper bound, so an MLM-AR gap on it mixes the objectives with the bound's looseness.", "",
             "Descriptive: no finding is registered on this curve. A difference at one seed has no interval over "
             "seeds and says nothing about its sign; one with several is read only where its interval excludes 0, "
             "uncorrected for the family.", ""]

    def millions(words: float) -> str:
        return f"{words / 1e6:.2f}M"

    for measure, part in points.groupby("measure", sort=True):
        parts += [f"## {measure}", "", *S.markdown_rows(["line", "words", "tokens", "n", "mean"], [
            [r.line, millions(r.words), millions(r.tokens), int(r.n), _cell(r)] for r in part.itertuples()]), ""]
        lead = lead_tables.get(measure)
        if lead is not None and not lead.empty:
            parts += ["Paired differences (a − b, same seeds):", "", *S.markdown_rows(
                ["a", "b", "words", "n", "a − b", "reading"],
                [[r.a, r.b, millions(r.words), int(r.n), S.cell(r.mean, r.ci95),
                  direction(r.mean, r.ci95, r.n, "a above b", "a below b")] for r in lead.itertuples()]), ""]
        change = change_tables.get(measure)
        if change is not None and not change.empty:
            parts += ["How a − b moves along the curve ((a − b) at the largest shared budget minus at the smallest, "
                      "paired by seed; whether that is a lead growing or shrinking depends on the sign of a − b):",
                      "", *S.markdown_rows(["a", "b", "from", "to", "n", "change", "reading"], [
                          [r.a, r.b, millions(r.from_words), millions(r.to_words), int(r.n), S.cell(r.mean, r.ci95),
                           direction(r.mean, r.ci95, r.n, "a − b rose", "a − b fell")] for r in change.itertuples()]),
                      ""]
    if crossing_lines:
        parts += ["## Where BLiMP passes the release's models", "", *crossing_lines, ""]
    if not costs.empty:
        kinds = [c for c in costs.columns if c != "seed"]
        parts += ["## Wall minutes per seed (every stage of every arm, each counted once)", "",
                  "-: no stage of that kind, or one that kept no time (its seed's total is then left out).", "",
                  *S.markdown_rows(["seed", *kinds], [[int(r["seed"]), *(f"{r[k]:.0f}" if r[k] == r[k] else "-"
                                                                          for k in kinds)] for _, r in costs.iterrows()]),
                  ""]
    if running is not None and not running.empty:
        parts += ["Not counted above (a launch has not come back: running, or stopped and not yet resumed): "
                  + "; ".join(f"{r.stage}, {r.seconds / 60:.0f} minutes so far" for r in running.itertuples()), ""]
    if not extrapolated.empty:
        parts += [f"## What one pass over {STRICT_WORDS / 1e6:.0f}M words (BabyLM's strict track) would cost", "",
                  "Each line's pretraining rate at its largest budget (wall time on this machine, validation and "
                  "checkpoints included, a branch with its share of the trunk) times the words. The GPU column is "
                  "the training FLOPs at an H100's dense bf16 datasheet peak: a lower bound no run of a model this "
                  "small approaches (its steps are bound by kernel launches), not an estimate; an estimate needs a "
                  "GPU's measured step time.", "",
                  *S.markdown_rows(["line", "rate read at", "n", "s per 1,000 words", "hours here",
                                    "training FLOPs per word", "H100 hours at peak (bound)"], [
                      [r.line, millions(r.at_words), int(r.n), f"{r.seconds_per_kword:.2f}", f"{r.hours_here:.1f}",
                       f"{r.flops_per_word:.3g}", f"{r.hours_at_peak:.3g}"] for r in extrapolated.itertuples()]), ""]
    parts += ["## Figures", "", *[f"![{name}]({name})" for name in figures], ""]
    return "\n".join(parts)


def plot_measure(points: pd.DataFrame, measure: str, published: pd.DataFrame) -> Figure:
    fig = Figure(figsize=(6.5, 4.2))
    ax = fig.subplots()
    part = points[points["measure"] == measure]
    for i, (line, group) in enumerate(part.groupby("line", sort=True)):
        low, high = int(group["n"].min()), int(group["n"].max())
        # the table's interval: over seeds, or over a one-seed BLiMP point's pairs; none where neither exists
        bars = [(group["mean"] - group["low"]).fillna(0), (group["high"] - group["mean"]).fillna(0)]
        ax.errorbar(group["words"], group["mean"], yerr=bars, marker="o", capsize=3,
                    color=f"C{i}", label=f"{line} (seeds {low}{'' if low == high else f'-{high}'})")
    if measure == BLIMP:
        ax.axhline(0.5, color="grey", linestyle="--", linewidth=1, label="chance")
        for model, score in published[published["level"] == "overall"][["arm", "mean"]].itertuples(index=False):
            ax.axhline(score, color="black", linestyle=":", linewidth=1)
            ax.annotate(f"{model} (release) {score:.3f}", xy=(0.01, score), xycoords=("axes fraction", "data"),
                        fontsize=7, va="bottom")
    ax.set_xscale("log")
    ax.set_xticks(sorted(part["words"].unique()), [f"{w / 1e6:.2f}M" for w in sorted(part["words"].unique())])
    ax.minorticks_off()
    ax.set_xlabel("pretraining budget (words seen; bars: 95 % interval over seeds, or over one seed's pairs)")
    ax.set_ylabel(COMMON_SCALE.get(measure, measure) if measure != BLIMP else "BLiMP accuracy (overall)")
    ax.legend(fontsize=7)
    ax.set_title(measure)
    return fig


def write_curves(root: str | Path) -> list[Path]:
    """The study's standard report, then curves.md, curves.csv, leads.csv and one PNG per measure."""
    root = Path(root)
    written = write_report(root)
    budgets = run_budgets(root)
    zeroshot = labelled_reports([root])
    all_seconds = S.stage_seconds(root)
    seconds, running = all_seconds[~all_seconds["running"]], all_seconds[all_seconds["running"]]
    runs = curve_runs(root, budgets, zeroshot, seconds)
    points = curve_points(runs, budgets)
    published = one_release(zeroshot)
    out = root / "report"
    measures = sorted(points["measure"].unique())
    compared = [m for m in measures if not m.startswith("minutes") and m != PER_WORD]
    lead_tables = {m: leads(runs, budgets, m) for m in compared}
    change_tables = {m: lead_changes(runs, budgets, m) for m in compared}
    figures = []
    for measure in measures:
        name = "curve_" + "".join(c if c.isalnum() else "_" for c in measure.lower()) + ".png"
        save_figure(plot_measure(points, measure, published), out / name)
        figures.append(name)
    atomic_write_text(out / "curves.csv", points.to_csv(index=False))
    lead_rows = [t.assign(measure=m) for m, t in lead_tables.items() if not t.empty]
    atomic_write_text(out / "leads.csv", (pd.concat(lead_rows) if lead_rows else pd.DataFrame()).to_csv(index=False))
    text = markdown(points, lead_tables, change_tables, crossing_table(crossings(points, published)),
                    seed_costs(seconds), extrapolations(points, budgets, PER_WORD), figures, root, running)
    atomic_write_text(out / "curves.md", text)
    return [*written, out / "curves.csv", out / "leads.csv", out / "curves.md", *(out / f for f in figures)]


def main() -> None:
    report_main(write_curves, __doc__)
