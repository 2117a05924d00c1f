"""Figures of a study: learning curves of every arm on one token axis (a panel per val/loss kind), the
downstream scores, the discrepancy and embedding diagnostics per layer, and the independence gap by distance.
Each function draws on the axes it is given (notebooks) and `analysis.reports.study_report` saves them as PNG files."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

from armlm.analysis.findings.verdicts import Claim
from armlm.analysis.tables.runs import curve_by_tokens
from armlm.common.atomic import atomic_file
from armlm.common.errors import ArmlmError

GEOMETRY = ["anisotropy_raw", "anisotropy_centred", "anisotropy_standardised", "self_similarity_same_type",
            "self_similarity_different_types"]
TOKEN_AXES = {"train/tokens_seen": "input tokens seen", "train/pred_tokens_seen": "predicted tokens seen"}


def save_figure(fig: Figure, path: Path, tight: bool = True) -> None:
    """A PNG written through a temporary file, so an interrupted report never leaves a truncated one; `tight`: lay
    the figure out first (False: the caller did, its own way)."""
    if tight:
        fig.tight_layout()
    with atomic_file(path, "wb") as f:
        fig.savefig(f, format="png", dpi=120, bbox_inches="tight")


def val_loss_kinds(pretraining: pd.DataFrame) -> pd.Series:
    """Each run's val/loss kind (next_token, masked_token, ...): the one val_nll_<kind> column its row of
    analysis.tables.study_tables.pretraining_runs fills. Kinds average different tokens, so they never share an axis."""
    columns = [c for c in pretraining.columns if c.startswith("val_nll_")]
    filled = pretraining[columns].notna()
    if not filled.any(axis=1).all():
        runs = pretraining.loc[~filled.any(axis=1), "run"].tolist()
        raise ArmlmError(f"{runs}: no val_nll_<kind> value; their summary.json lacks val_loss, rerun them")
    return filled.idxmax(axis=1).str.removeprefix("val_nll_")


def plot_learning_curves(pretraining: pd.DataFrame, axes: list[Axes], tokens_tag: str = "train/tokens_seen") -> None:
    """val/loss against tokens seen, one panel per val/loss kind (`val_loss_kinds(pretraining).unique()`, in
    that order, on as many axes): the arms of that kind, the mean over seeds and the seeds' range as a band,
    and the unigram baseline (training's val/unigram_baseline) of the panel's runs, a line per distinct value.
    The seeds of an arm validate at the same steps, so their curves are averaged point by point (MLM's
    predicted-token counts differ a little between seeds)."""
    kinds = val_loss_kinds(pretraining)
    panels = list(kinds.unique())
    if len(axes) < len(panels):
        raise ArmlmError(f"{len(panels)} val/loss kinds ({', '.join(panels)}) need as many axes; got {len(axes)}")
    for ax, kind in zip(axes, panels):
        of_kind = pretraining[kinds == kind]
        for arm, runs in of_kind.groupby("arm", sort=False):
            curves = [curve_by_tokens(Path(run), "val/loss", tokens_tag) for run in runs["run"]]
            points = min(len(c) for c in curves)
            tokens = np.mean([c.index[:points] for c in curves], axis=0)
            losses = np.array([c.to_numpy()[:points] for c in curves])
            ax.plot(tokens, losses.mean(axis=0), marker=".", label=f"{arm} ({runs['objective'].iloc[0]})")
            if len(curves) > 1:
                ax.fill_between(tokens, losses.min(axis=0), losses.max(axis=0), alpha=0.2)
        baselines = of_kind.groupby("unigram_baseline", sort=False)["arm"].unique()
        for style, (value, arms) in zip(("--", ":", "-.", (0, (5, 5))) * len(baselines), baselines.items()):
            ax.axhline(value, color="grey", linestyle=style,
                       label="unigram baseline" + ("" if len(baselines) == 1 else f" ({', '.join(arms)})"))
        ax.set_title(f"val/loss kind: {kind}")
        ax.set_xlabel(TOKEN_AXES.get(tokens_tag, tokens_tag))
        ax.set_ylabel("val/loss (nats per predicted token)")
        ax.legend(fontsize=8)


def plot_downstream(downstream: pd.DataFrame, axes: list[Axes], primary: Mapping[str, str]) -> None:
    """One panel per task: its primary metric (`primary`, by task: analysis.tables.study_tables.primary_metrics) on its first
    dev split, a bar per arm and variant with the 95 % CI over seeds, and the majority-class baseline as a dashed
    line."""
    for ax, (task, rows) in zip(axes, downstream.groupby("task", sort=False)):
        metric = primary[task]
        rows = rows[(rows["metric"] == metric) & (rows["split"] == rows["split"].iloc[0])]
        labels = [f"{a} · {v}" for a, v in zip(rows["arm"], rows["variant"])]
        ax.bar(range(len(rows)), rows["mean"], yerr=rows["ci95"].fillna(0), capsize=3,
               color=[f"C{i}" for i in pd.factorize(rows["arm"])[0]])
        if rows["baseline"].notna().any():
            ax.axhline(rows["baseline"].dropna().iloc[0], color="grey", linestyle="--", linewidth=1)
        ax.set_xticks(range(len(rows)), labels, fontsize=7, rotation=60, ha="right", rotation_mode="anchor")
        ax.set_title(f"{task} ({metric})")


def plot_layers(representations: pd.DataFrame, measures: list[str], axes: list[Axes]) -> None:
    """A panel per measure: its value per layer for every arm (mean over seeds, 95 % CI bars)."""
    for ax, measure in zip(axes, measures):
        rows = representations[representations["measure"] == measure]
        for arm, part in rows.groupby("arm", sort=False):
            ax.errorbar(part["layer"], part["mean"], yerr=part["ci95"].fillna(0), marker="o", capsize=3, label=arm)
        ax.set_title(measure, fontsize=9)
        ax.set_xlabel("layer")
        ax.set_xticks(sorted(rows["layer"].unique()))
    if len(axes):
        axes[0].legend(fontsize=7)


def plot_mask_share(mask_share: pd.DataFrame, ax: Axes) -> None:
    """Discrepancy (iii): the share of [MASK] in each arm's pretraining inputs and fine-tuning inputs."""
    x = np.arange(len(mask_share))
    ax.bar(x - 0.2, mask_share["pretraining"], width=0.4, label="pretraining inputs")
    ax.bar(x + 0.2, mask_share["finetuning"], width=0.4, label="fine-tuning inputs")
    ax.set_xticks(x, mask_share["arm"], fontsize=8, rotation=30)
    ax.set_ylabel("[MASK] share of input tokens")
    ax.legend(fontsize=8)


def plot_gap_by_distance(gap: pd.DataFrame, ax: Axes) -> None:
    """The independence gap of the arm's headline joint per distance bin (both pair kinds pooled per
    seed, weighted by pairs), mean over seeds with 95 % CI bars."""
    bins = gap.drop_duplicates("low").sort_values("low")
    position = {low: i for i, low in enumerate(bins["low"])}
    for arm, rows in gap.groupby("arm", sort=False):
        ax.errorbar([position[low] for low in rows["low"]], rows["mean"], yerr=rows["ci95"].fillna(0),
                    marker="o", capsize=3, label=arm)
    ax.set_xticks(range(len(bins)), bins["distance"])
    ax.axhline(0.0, color="grey", linewidth=0.8)
    ax.set_xlabel("distance |i - j| (subword tokens)")
    ax.set_ylabel("log p(a,b) - log p(a) - log p(b) (nats)")
    ax.legend(fontsize=8)


def plot_epochs(epochs: pd.DataFrame, ax: Axes, x: str) -> None:
    """Validation NLL per target token of each objective against epochs over the same unique tokens, or
    against the training FLOPs those runs spent (`x`: "epochs" or "flops_seen"), mean ± 95 % CI over seeds."""
    nll = epochs[epochs["quantity"] == "val_likelihood"]
    flops = epochs[epochs["quantity"] == "flops_seen"].set_index(["objective", "train_tokens", "epochs"])["mean"]
    for (objective, unique), rows in nll.groupby(["objective", "train_tokens"], sort=False):
        xs = rows["epochs"] if x == "epochs" else flops.loc[(objective, unique)].reindex(rows["epochs"]).to_numpy()
        ax.errorbar(xs, rows["mean"], yerr=rows["ci95"].fillna(0), marker="o", capsize=3,
                    linestyle="-" if len(rows) > 1 else "none", label=f"{objective}, {unique:,} unique tokens")
    ax.set_xscale("log", base=2 if x == "epochs" else 10)
    ax.xaxis.set_minor_formatter(NullFormatter())  # labelled minor ticks overlap over less than a decade of FLOPs
    ax.set_xlabel("epochs over the unique tokens" if x == "epochs" else "training FLOPs")
    ax.set_ylabel("val NLL per target token (AR exact, MDLM bound)")
    ax.legend(fontsize=8)


VERDICT_COLOURS = {"reproduced": "tab:green", "contradicted": "tab:red", "unresolved": "tab:gray",
                   "not evidence": "tab:orange", "interim": "tab:blue"}


def claim_bounds(claim: Claim) -> list[float]:
    """The lines a registered claim is read against, in A - B: -margin (non-inferiority of 'greater'), +-margin
    (equivalence), the smallest effect (superiority), each mirrored for a claim that A is 'less' than B."""
    if claim.kind == "equivalence":
        return [-claim.margin, claim.margin]
    if claim.kind == "non_inferiority":
        return [-claim.sign * claim.margin]
    return [claim.sign * claim.smallest_effect]


def plot_findings(table: pd.DataFrame, ax: Axes) -> None:
    """Each finding's A - B with its 95 % interval over seeds, a row each, coloured by verdict, beside the registered
    claim's bounds (dotted): a picture of the findings table, so a reader sees how far each interval is from its line."""
    rows = table.dropna(subset=["difference"]).reset_index(drop=True)
    for y, row in rows.iterrows():
        colour = VERDICT_COLOURS.get(str(row["verdict"]), "black")
        low, high = row.get("ci_low"), row.get("ci_high")
        err = None if pd.isna(low) or pd.isna(high) else [[row["difference"] - low], [high - row["difference"]]]
        ax.errorbar(row["difference"], y, xerr=err, fmt="o", color=colour, capsize=3)
        claim = Claim(row["kind"], row["direction"], float(row["smallest_effect"]), float(row["margin"]))
        for bound in claim_bounds(claim):
            ax.plot([bound, bound], [y - 0.35, y + 0.35], color=colour, linestyle=":", linewidth=1.2)
    ax.axvline(0.0, color="black", linewidth=0.8)
    ax.set_yticks(range(len(rows)), [f"{f}: {v}" for f, v in zip(rows["finding"], rows["verdict"])])
    ax.set_ylim(len(rows) - 0.5, -0.5)  # the table's order, top to bottom
    ax.set_xlabel("A - B, 95 % interval over seeds (dotted: the registered margin or smallest effect)")
