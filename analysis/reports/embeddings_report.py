"""The embeddings study's table: every static method and every layer of the contextual checkpoints on the word
benchmarks, and every way of feeding NER, as mean ± 95 % CI over seeds (report/embeddings.md, .csv and a figure
of the word benchmarks by layer).

    armlm report embeddings <study root>
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib import colormaps
from matplotlib.figure import Figure  # figures without pyplot: no backend, no global state
from matplotlib.ticker import MaxNLocator

from armlm.analysis.reports.registry import report_main
from armlm.analysis.reports.study_plots import save_figure
from armlm.analysis.tables.study_tables import (
    WORDS,
    cell,
    finetuning_runs,
    markdown_rows,
    over_seeds,
    per_checkpoint,
    stage_reports,
)
from armlm.common.atomic import atomic_write_text

WORD_COLUMNS = {"simlex999": "SimLex ρ", "wordsim353": "WordSim ρ", "semantic": "analogies, semantic",
                "syntactic": "analogies, syntactic", "rare": "SimLex rare-word ρ"}
NER_COLUMN = "CoNLL features F1"


def word_rows(root: Path) -> pd.DataFrame:
    """One row per arm, seed and layer ('static' for a static method), one column per word benchmark."""
    rows = []
    for (arm, seed), report in stage_reports(root, WORDS).items():
        for layer, scores in report["layers"].items():
            rows.append({"arm": arm, "seed": seed, "representation": "vectors" if layer == "static" else f"layer {layer}",
                         "simlex999": scores["simlex999"]["spearman"], "wordsim353": scores["wordsim353"]["spearman"],
                         "semantic": scores["analogies"]["semantic"]["accuracy"],
                         "syntactic": scores["analogies"]["syntactic"]["accuracy"],
                         "rare": scores["simlex999"]["rare_spearman"]})
    return pd.DataFrame(rows)


def ner_rows(root: Path) -> pd.DataFrame:
    runs = finetuning_runs(root)
    if runs.empty:
        return pd.DataFrame(columns=["arm", "seed", "representation", "ner"])
    f1 = per_checkpoint(runs)
    f1 = f1[(f1["metric"] == "f1") & (f1["split"] == "validation")]
    names = {"static": "vectors", "last": "features: last layer", "concat4": "features: top 4 concatenated",
             "mix": "features: scalar mix"}
    return pd.DataFrame({"arm": f1["arm"], "seed": f1["seed"], "representation": f1["variant"].map(names),
                         "ner": f1["value"]})


def embeddings_table(root: Path) -> pd.DataFrame:
    """Long table: arm, representation, quantity, mean, ci95, n."""
    words, ner = word_rows(root), ner_rows(root)
    parts = [over_seeds(words, ["arm", "representation"], list(WORD_COLUMNS)) if not words.empty else None,
             over_seeds(ner, ["arm", "representation"], ["ner"]) if not ner.empty else None]
    parts = [p for p in parts if p is not None]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def markdown(table: pd.DataFrame) -> str:
    if table.empty:
        return "# Embeddings study\n\nNo stage has finished yet.\n"
    columns = {**WORD_COLUMNS, "ner": NER_COLUMN}
    wide = table.assign(text=[cell(m, c) for m, c in zip(table["mean"], table["ci95"])]).pivot_table(
        index=["arm", "representation"], columns="quantity", values="text", aggfunc="first", sort=False)
    seeds = table.groupby(["arm", "representation"], sort=False)["n"].max()
    lines = ["# Embeddings study", "",
             ("Mean ± 95 % CI over seeds (t, n - 1 degrees of freedom). Word benchmarks read only words with their "
              "own trained vector (seen 5 times in the train split), so every row scores the same pairs and questions; "
              "the rare-word column scores every SimLex pair with a word seen fewer than 20 times, unseen words taking "
              "the method's own vector or none (cosine 0). Contextual rows: type-level vectors per layer (layer 0 the "
              "embedding layer), then NER on the frozen checkpoint three ways. '-': not measured for that row."), "",
             *markdown_rows(["arm", "representation", "seeds", *columns.values()], [
                 [arm, representation, int(seeds[(arm, representation)]),
                  *(row.get(key) if isinstance(row.get(key), str) else "-" for key in columns)]
                 for (arm, representation), row in wide.iterrows()])]
    return "\n".join(lines) + "\n"


def figure(words: pd.DataFrame, path: Path) -> bool:
    """SimLex and WordSim by layer for each checkpoint arm, each static method a horizontal line.

    Every arm gets its own colour from one cycle (axhline does not advance matplotlib's cycle, so the static
    lines would all be drawn in the first colour), static methods dashed, checkpoints solid with markers."""
    if words.empty:
        return False
    colours = colormaps["tab10"].colors
    arms = list(dict.fromkeys(words["arm"]))
    colour_of = {arm: colours[i % len(colours)] for i, arm in enumerate(arms)}
    fig = Figure(figsize=(11, 3.8))
    axes = fig.subplots(1, 2, sharey=True)
    for ax, column in zip(axes, ("simlex999", "wordsim353")):
        means = words.groupby(["arm", "representation"], sort=False)[column].mean().reset_index()
        for arm, part in means.groupby("arm", sort=False):
            if (part["representation"] == "vectors").all():
                ax.axhline(part[column].iloc[0], linestyle="--", linewidth=1.2, color=colour_of[arm], label=arm)
            else:
                layers = part["representation"].str.removeprefix("layer ").astype(int)
                ax.plot(layers, part[column], marker="o", color=colour_of[arm], label=arm)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("layer (0: embeddings)")
        ax.set_title(WORD_COLUMNS[column] + ", mean over seeds")
    axes[0].set_ylabel("Spearman ρ")
    handles, labels = axes[1].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="center right")
    fig.tight_layout(rect=(0, 0, 0.84, 1))
    save_figure(fig, path, tight=False)
    return True


def write_embeddings_report(root: str | Path) -> list[Path]:
    root = Path(root)
    out = root / "report"
    out.mkdir(parents=True, exist_ok=True)
    table = embeddings_table(root)
    atomic_write_text(out / "embeddings.csv", table.to_csv(index=False))
    atomic_write_text(out / "embeddings.md", markdown(table))
    written = [out / "embeddings.csv", out / "embeddings.md"]
    if figure(word_rows(root), out / "embeddings_by_layer.png"):
        written.append(out / "embeddings_by_layer.png")
    return written


def main() -> None:
    report_main(write_embeddings_report, __doc__)
