"""Write a study's report: tables as CSV (mean, 95 % CI half-width and n over seeds) and as Markdown
(report.md, "mean ± CI"), and the figures as PNG files, all under <root>/report. `armlm study` calls it when
its stages are done; rerun it by hand on any study folder:

    armlm report study outputs/studies/ar_vs_mlm-cpu
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure  # figures without pyplot: no backend, no global state

from armlm.analysis.reports import study_plots as P
from armlm.analysis.reports.blimp_report import write_blimp_report
from armlm.analysis.reports.registry import report_main
from armlm.analysis.tables import study_tables as S
from armlm.common.atomic import atomic_write_text
from armlm.common.errors import ArmlmError


@dataclass
class StudyTables:
    """Every table of a study, summarised over seeds (columns mean, ci95, n) unless named *_runs."""

    pretraining_runs: pd.DataFrame
    pretraining: pd.DataFrame
    downstream: pd.DataFrame
    finetune_feature_gap: pd.DataFrame
    mask_share: pd.DataFrame
    independence: pd.DataFrame
    gap_by_distance: pd.DataFrame
    representations: pd.DataFrame
    epochs: pd.DataFrame  # val_likelihood and FLOPs per objective and epochs over the unique data (data_constrained)
    primary_metrics: dict[str, str] = field(default_factory=dict)  # task -> the metric its plot shows (results.json)


def with_common_scale(pretraining: pd.DataFrame, reports: dict) -> pd.DataFrame:
    """Each run's figures on the one scale every objective shares (`armlm evaluate`'s likelihood section): NLL per
    held-out target that is not [EOD] (exact, or the any-order bound), the unigram NLL of those same targets, and
    the margin between them. NaN for a run that was not scored."""
    common = pd.DataFrame([{"arm": arm, "seed": seed, "heldout_nll": r["likelihood"]["nll_per_token_without_eod"],
                            "heldout_unigram": r["likelihood"]["unigram_nll_per_token_without_eod"],
                            "heldout_below_unigram": r["likelihood"]["below_unigram"]}
                           for (arm, seed), r in reports.items() if "likelihood" in r],
                          columns=["arm", "seed", "heldout_nll", "heldout_unigram", "heldout_below_unigram"])
    return pretraining.merge(common, on=["arm", "seed"], how="left")


def study_tables(root: str | Path) -> StudyTables:
    root = Path(root)
    pretraining = S.pretraining_runs(root)
    if pretraining.empty:
        raise ArmlmError(f"{root} holds no finished pretraining run (<arm>/seed<k>/pretrain/summary.json); "
                         "run armlm study first, or give the study's root folder")
    runs = S.finetuning_runs(root)
    finetuning = S.per_checkpoint(runs)
    reports = S.stage_reports(root, S.DIAGNOSTICS)
    pretraining = with_common_scale(pretraining, reports)
    downstream = S.over_seeds(finetuning, ["task", "split", "metric", "arm", "variant"], ["value"])
    if not finetuning.empty:
        baselines = finetuning.groupby(["task", "split", "metric"])["baseline"].first()
        downstream = downstream.join(baselines, on=["task", "split", "metric"])
    gap = S.gap_by_distance_runs(reports)
    if not gap.empty:  # pool the pair kinds of one run, weighting each bin's mean by its pairs
        gap["weighted"] = gap["gap"] * gap["pairs"]
        gap = gap.groupby(["arm", "seed", "low", "distance"], sort=False)[["weighted", "pairs"]].sum().reset_index()
        gap["gap"] = gap["weighted"] / gap["pairs"]
    finetune_share = (finetuning.groupby("arm")["input_mask_share"].mean()
                      if not finetuning.empty else pd.Series(dtype=float))
    mask_share = pretraining.groupby("arm", sort=False)["mask_share"].mean().rename("pretraining").to_frame()
    mask_share["finetuning"] = finetune_share.reindex(mask_share.index)
    return StudyTables(
        pretraining_runs=pretraining,
        pretraining=S.over_seeds(pretraining, ["arm", "objective"], [
            *sorted(c for c in pretraining.columns if c.startswith("val_nll_")), "heldout_nll", "heldout_unigram",
            "heldout_below_unigram", "tokens_seen",
            "pred_tokens_seen", "mask_share", "wall_seconds"]),
        downstream=downstream,
        finetune_feature_gap=S.over_seeds(S.finetune_feature_gap(finetuning), ["task", "split", "metric", "arm"],
                                          ["value"]),
        mask_share=mask_share.reset_index(),
        independence=S.over_seeds(S.independence_runs(reports), ["arm", "kind", "joint"],
                                  ["ppl", "pseudo_ppl", "p_ppl", "u_ppl", "gap"]),
        gap_by_distance=S.over_seeds(gap, ["arm", "low", "distance"], ["gap"]) if not gap.empty else pd.DataFrame(),
        representations=S.over_seeds(S.representation_runs(reports), ["arm", "layer", "measure"], ["value"]),
        epochs=epochs_table(pretraining),
        primary_metrics=S.primary_metrics(runs),
    )


def epochs_table(pretraining: pd.DataFrame) -> pd.DataFrame:
    """Validation NLL per target token (AR exact, masked diffusion a bound) and training FLOPs per objective,
    unique training tokens and epochs over them, over seeds: the data-constrained runs only (those trained on
    a slice of the split, data.max_train_tokens); empty when there are none."""
    if "epochs" not in pretraining:
        return pd.DataFrame()
    runs = pretraining.dropna(subset=["val_likelihood", "epochs", "train_tokens"])
    if runs.empty:
        return pd.DataFrame()
    runs = runs.assign(epochs=runs["epochs"].round(2), train_tokens=runs["train_tokens"].astype(int))
    keys = ["objective", "train_tokens", "epochs"]
    return S.over_seeds(runs.sort_values(keys), keys, ["val_likelihood", "flops_seen"])


def markdown_table(table: pd.DataFrame, index: list[str], columns: list[str]) -> str:
    """A pivot of "mean ± CI" cells."""
    if table.empty:
        return "(none)\n"
    cells = table.assign(cell=[S.cell(m, c) for m, c in zip(table["mean"], table["ci95"])])
    wide = cells.pivot_table(index=index, columns=columns, values="cell", aggfunc="first", sort=False)
    if isinstance(wide.columns, pd.MultiIndex):
        wide.columns = [" / ".join(str(c) for c in col) for col in wide.columns]
    wide = wide.reset_index().fillna("-")
    return "\n".join(S.markdown_rows(list(wide.columns), wide.itertuples(index=False))) + "\n"


def markdown(t: StudyTables, root: Path, figures: list[str]) -> str:
    seeds = sorted(int(s) for s in t.pretraining_runs["seed"].unique())
    primary = t.downstream[~t.downstream["metric"].astype(str).str.startswith(S.SECONDARY_PREFIXES)] \
        if not t.downstream.empty else t.downstream
    gap = t.finetune_feature_gap
    if not gap.empty:
        gap = gap[gap["metric"] == gap["task"].map(t.primary_metrics)]
    share = t.mask_share.assign(**{c: t.mask_share[c].map(lambda v: "-" if v != v else f"{v:.4f}")
                                   for c in ("pretraining", "finetuning")})
    parts = [
        f"# Study report: {root}", "",
        f"Seeds {seeds}; every cell is mean ± 95 % CI over seeds (Student t; no interval for one seed). "
        "The CSV files beside this report hold the same tables with n per cell.", "",
        "## Pretraining", "",
        "val_nll_<kind> columns are different quantities (next_token: AR's every next token; masked_token: MLM's "
        "selected positions, some left visible; masked_token_any_rate: masked diffusion's masked positions at "
        "rates over (0, 1]): compare each only within its column (learning_curves.png draws each kind in a panel of "
        "its own, with its runs' unigram baseline). heldout_nll is the one scale "
        "every objective shares: `armlm evaluate`'s NLL per held-out target that is not [EOD] (exact for causal readers, "
        "the any-order bound for bidirectional ones), beside the unigram NLL of the same targets (heldout_unigram); "
        "heldout_below_unigram, their difference, is how far a run learned (the findings' gate reads it).", "",
        markdown_table(t.pretraining, ["arm", "objective"], ["quantity"]),
        *epochs_section(t),
        "## Downstream (dev splits)", "",
        markdown_table(primary, ["task", "split", "metric", "baseline"], ["arm", "variant"]),
        "## Pretrain-finetune discrepancy", "",
        "(i) Representation shift: cosine / linear CKA between the states of unchanged tokens for clean input "
        "and for input with k of the other tokens replaced by [MASK], per layer. shift_left: k of the tokens "
        "before a random cut replaced by [MASK] and only the tokens after it read, so causal and bidirectional "
        "attention see the same masks (the fair AR-MLM comparison).", "",
        markdown_table(t.representations[t.representations["measure"].str.startswith("shift_")],
                       ["arm", "measure"], ["layer"]) if not t.representations.empty else "(none)\n",
        "(ii) Fine-tuned minus feature-based score (same arm, seed and task):", "",
        markdown_table(gap, ["task", "split", "metric"], ["arm"]) if not gap.empty else "(none)\n",
        "(iii) Share of [MASK] among input tokens:", "",
        "\n".join(S.markdown_rows(["arm", "pretraining", "fine-tuning"], share[["arm", "pretraining", "finetuning"]]
                                   .itertuples(index=False))) + "\n",
        "## Contextual-embedding geometry (per layer)", "",
        markdown_table(t.representations[~t.representations["measure"].str.startswith("shift_")],
                       ["arm", "measure"], ["layer"]) if not t.representations.empty else "(none)\n",
        "## Independence diagnostics", "",
        "ppl (AR, exact) and pseudo_ppl (MLM, one token masked at a time) are different quantities. P-PPL, "
        "U-PPL and the gap compare across checkpoints only when both were scored exactly or on the same "
        "candidate sets with a measured restriction error (README, \"Independence diagnostics\").", "",
        markdown_table(t.independence, ["arm", "kind", "joint"], ["quantity"]),
        "Independence gap by distance (both pair kinds):", "",
        markdown_table(t.gap_by_distance, ["arm"], ["distance"]) if not t.gap_by_distance.empty else "(none)\n",
        "## Figures", "", *[f"![{name}]({name})" for name in figures], "",
    ]
    return "\n".join(parts)


def epochs_section(t: StudyTables) -> list[str]:
    if t.epochs.empty:
        return []
    nll = t.epochs[t.epochs["quantity"] == "val_likelihood"]
    return ["## Repeated data: validation NLL against epochs", "",
            "NLL per target token of the validation blocks: exact for AR, an upper bound for masked diffusion "
            "(the same tokens). Each epoch count is a run of its own over the same unique tokens (figure "
            "epochs.png, against epochs and against training FLOPs).", "",
            markdown_table(nll, ["train_tokens", "epochs"], ["objective"])]


def subplots(ncols: int, width: float, height: float) -> tuple[Figure, list]:
    fig = Figure(figsize=(width * ncols, height))
    return fig, list(fig.subplots(1, ncols, squeeze=False)[0])


def study_figures(t: StudyTables) -> dict[str, Figure]:
    """The study's figures by name: learning_curves always; downstream, discrepancy, embeddings and
    gap_by_distance when the study has those results. The report saves them; the notebook shows them."""
    figures = {}
    # A column per val/loss kind (they average different tokens: never one axis), a row per token count.
    kinds = len(P.val_loss_kinds(t.pretraining_runs).unique())
    fig = Figure(figsize=(6 * kinds, 8))
    grid = fig.subplots(2, kinds, squeeze=False)
    for row, (tag, what) in enumerate((("train/tokens_seen", "equal input tokens"),
                                       ("train/pred_tokens_seen", "against predicted tokens"))):
        P.plot_learning_curves(t.pretraining_runs, list(grid[row]), tag)
        for ax in grid[row]:
            ax.set_title(f"{ax.get_title()}, {what}")
    figures["learning_curves"] = fig
    if not t.downstream.empty:
        fig, axes = subplots(t.downstream["task"].nunique(), 3.5, 4)
        P.plot_downstream(t.downstream, axes, t.primary_metrics)
        figures["downstream"] = fig
    if not t.representations.empty:
        shift = sorted(m for m in t.representations["measure"].unique() if m.startswith("shift_"))
        fig, axes = subplots(len(shift) + 1, 3.6, 3.6)
        P.plot_layers(t.representations, shift, axes[:-1])
        P.plot_mask_share(t.mask_share, axes[-1])
        figures["discrepancy"] = fig
        fig, axes = subplots(len(P.GEOMETRY), 3.4, 3.4)
        P.plot_layers(t.representations, P.GEOMETRY, axes)
        figures["embeddings"] = fig
    if not t.epochs.empty:
        fig, axes = subplots(2, 5, 4)
        P.plot_epochs(t.epochs, axes[0], "epochs")
        P.plot_epochs(t.epochs, axes[1], "flops_seen")
        figures["epochs"] = fig
    if not t.gap_by_distance.empty:
        fig, axes = subplots(1, 7, 4)
        P.plot_gap_by_distance(t.gap_by_distance, axes[0])
        figures["gap_by_distance"] = fig
    return figures


def figures(t: StudyTables, out: Path) -> list[str]:
    written = []
    for name, fig in study_figures(t).items():
        P.save_figure(fig, out / f"{name}.png")
        written.append(f"{name}.png")
    return written


def write_report(root: str | Path) -> list[Path]:
    """Every table as CSV, report.md and the figures; returns the files written."""
    root = Path(root)
    t = study_tables(root)
    out = root / "report"
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name in ("pretraining_runs", "pretraining", "downstream", "finetune_feature_gap", "mask_share",
                 "independence", "gap_by_distance", "representations", "epochs"):
        table: pd.DataFrame = getattr(t, name)
        if not table.empty:
            atomic_write_text(out / f"{name}.csv", table.to_csv(index=False))
            written.append(out / f"{name}.csv")
    names = figures(t, out)
    atomic_write_text(out / "report.md", markdown(t, root, names))
    return [*written, *(out / n for n in names), out / "report.md", *write_blimp_report(root)]


def main() -> None:
    report_main(write_report, __doc__)
