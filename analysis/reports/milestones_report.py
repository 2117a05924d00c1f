"""BLiMP along BabyLM's word milestones: a study whose `zeroshot.at_words` scores each pretraining arm's checkpoint
at each milestone (study=strict_small) gets, beside its standard report, milestones.md, milestones.csv and
milestones.png: per arm and scoring method, the accuracy at every milestone (mean over seeds with its 95 % t interval;
one seed: the interval over its pairs) and the pairs that tied, with BabyLM's published GPT-2 strict-small baseline
drawn as a reference. That baseline was trained on the BabyLM corpus and scored on all 67 paradigms, so it marks a
scale, not a comparison.

    armlm report milestones <study root>
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure  # figures without pyplot: no backend, no global state

from armlm.analysis.reports.registry import report_main
from armlm.analysis.reports.study_plots import save_figure
from armlm.analysis.reports.study_report import write_report
from armlm.analysis.tables import study_tables as S
from armlm.common.atomic import atomic_write_text, read_artefact
from armlm.common.babylm import MILLION
from armlm.common.errors import ArmlmFileError

# babylm-eval's README (at 45fe2c1): its GPT-2 baseline trained on the Strict-Small corpus
# (gpt2-baseline-BabyLM-2026-Strict-Small), scored by lm-eval's `blimp` task (its zeroshot_eng table): the original
# BLiMP's pairs, all 67 paradigms, as a share. The strict track's own pipeline reads 65.08 for the same model on its
# filtered BLiMP, a different set of pairs.
GPT2_STRICT_SMALL_BLIMP = 0.6439
COLUMNS = ["arm", "seed", "words", "method", "accuracy", "ci_low", "ci_high", "ties", "pairs"]


def folder_words(name: str) -> int:
    """The words a milestone folder stands for: chck_<N>M (common.babylm.milestone_name) is N million."""
    return round(float(name.removeprefix("chck_").removesuffix("M")) * MILLION)


def milestone_runs(root: Path) -> pd.DataFrame:
    """One row per arm, seed, milestone and method: BLiMP overall, its interval over pairs, and its ties."""
    rows = []
    for path in sorted(root.glob(f"*/seed*/{S.MILESTONES}/*/zeroshot.json")):
        arm, seed = S.arm_and_seed(path, root)
        for method, results in read_artefact(path)["blimp"]["results"].items():
            overall = next(r for r in results if r["level"] == "overall")
            rows.append({"arm": arm, "seed": seed, "words": folder_words(path.parent.name), "method": method,
                         **{k: overall.get(k, math.nan) for k in COLUMNS[4:]}})
    return pd.DataFrame(rows, columns=COLUMNS).sort_values(["arm", "method", "words", "seed"], ignore_index=True)


def milestone_points(runs: pd.DataFrame) -> pd.DataFrame:
    """Per arm, method and milestone: the mean accuracy over seeds, its 95 % interval (over seeds; with one seed, over
    its pairs) and the ties summed over seeds."""
    points = S.over_seeds(runs, ["arm", "method", "words"], ["accuracy"]).drop(columns="quantity")
    if points.empty:
        return points.assign(low=[], high=[], ties=[])
    one = runs.groupby(["arm", "method", "words"]).agg(low=("ci_low", "first"), high=("ci_high", "first"),
                                                       ties=("ties", lambda t: t.sum(min_count=1))).reset_index()
    points = points.merge(one, on=["arm", "method", "words"])
    several = points["n"] > 1
    points.loc[several, "low"] = points["mean"] - points["ci95"]
    points.loc[several, "high"] = points["mean"] + points["ci95"]
    return points


def _ties(ties: float) -> str:
    return "" if ties != ties else f" {{{int(ties)}}}"  # NaN: a report that counts no ties


def markdown(points: pd.DataFrame, root: Path) -> str:
    words = sorted(points["words"].unique())
    lines = [f"# BLiMP at BabyLM's word milestones: {root}", "",
             "Each cell: accuracy over the study's pairs of the shared paradigms [95 % interval: over seeds, or over "
             "one seed's pairs], ties in braces (a tie counts as wrong here and as right in BabyLM's 2025 pipeline). "
             "Words are counted as the challenge counts them: whitespace words of the training text, repeats "
             f"included. BabyLM's GPT-2 strict-small baseline reads {GPT2_STRICT_SMALL_BLIMP:.4f} on all 67 "
             "paradigms (lm-evaluation-harness's blimp, babylm-eval's README) after training on the BabyLM corpus: "
             "a different corpus and paradigm set, so it marks a scale, not a comparison.", ""]
    rows = []
    for (arm, method), part in points.groupby(["arm", "method"], sort=True):
        at = part.set_index("words")
        rows.append([arm, method, int(at["n"].max()), *(
            f"{at.loc[w, 'mean']:.3f} [{at.loc[w, 'low']:.3f}, {at.loc[w, 'high']:.3f}]" + _ties(at.loc[w, "ties"])
            if w in at.index else "-" for w in words)])
    lines += S.markdown_rows(["arm", "method", "seeds", *(f"{w / MILLION:g}M" for w in words)], rows)
    return "\n".join([*lines, "", "![milestones.png](milestones.png)", ""])


def plot(points: pd.DataFrame) -> Figure:
    """One panel per arm, its methods as lines, sharing the accuracy axis: eight lines in one panel cannot be read."""
    arms = sorted(points["arm"].unique())
    colours = {m: f"C{i}" for i, m in enumerate(sorted(points["method"].unique()))}  # a method's colour in every panel
    fig = Figure(figsize=(3.6 * len(arms) + 1, 4.2), layout="constrained")
    axes = fig.subplots(1, len(arms), sharey=True, squeeze=False)[0]
    for ax, arm in zip(axes, arms):
        for method, part in points[points["arm"] == arm].groupby("method", sort=True):
            x = part["words"] / MILLION
            ax.plot(x, part["mean"], marker="o", ms=3, label=method, color=colours[method])
            ax.fill_between(x, part["low"], part["high"], color=colours[method], alpha=0.15, lw=0)
        ax.axhline(GPT2_STRICT_SMALL_BLIMP, color="0.3", ls="--", lw=1)
        ax.axhline(0.5, color="0.6", ls=":", lw=1)
        ax.set(xlabel="words seen (millions)", title=arm)
        ax.legend(fontsize=7, loc="lower right")
    axes[0].set_ylabel("BLiMP accuracy")
    axes[0].text(axes[0].get_xlim()[0], GPT2_STRICT_SMALL_BLIMP, " GPT-2 strict-small (BabyLM corpus, 67 paradigms)",
                 va="bottom", fontsize=7, color="0.3")
    fig.suptitle("BLiMP at each word milestone (dotted: chance)")
    return fig


def write_milestones(root: str | Path) -> list[Path]:
    """The study's standard report, then milestones.md, milestones.csv and milestones.png."""
    root = Path(root)
    written = write_report(root)
    runs = milestone_runs(root)
    if runs.empty:
        raise ArmlmFileError(f"no {S.MILESTONES}/*/zeroshot.json under {root}: run the study's milestone stages first "
                             "(a study with zeroshot.at_words)")
    points = milestone_points(runs)
    out = root / "report"
    atomic_write_text(out / "milestones.csv", points.to_csv(index=False))
    atomic_write_text(out / "milestones.md", markdown(points, root))
    save_figure(plot(points), out / "milestones.png")
    return [*written, out / "milestones.csv", out / "milestones.md", out / "milestones.png"]


def main() -> None:
    report_main(write_milestones, "`armlm report milestones <study root>`: BLiMP at each word milestone.")
