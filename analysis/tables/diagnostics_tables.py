"""Diagnostics reports (diagnostics.json from `armlm evaluate`) as one table and a gap-vs-distance plot.

AR and MLM checkpoints share the rows' names where they measure the same thing, so one table holds both:
each checkpoint contributes its own rows (MLM: every construction; AR: its exact joint).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from matplotlib.axes import Axes

from armlm.common.atomic import read_artefact
from armlm.diagnostics.pairwise import DISTANCE_BINS, distance_bins
from armlm.diagnostics.report import ROW_LABELS


def find_reports(root: str | Path) -> list[Path]:
    """Every diagnostics.json below `root` (or `root` itself if it is one)."""
    root = Path(root)
    return [root] if root.is_file() else sorted(root.rglob("diagnostics.json"))


def load_reports(paths: list[Path]) -> dict[str, dict[str, Any]]:
    """name -> report; the name is the report's folder (e.g. outputs/study/diagnostics/<ar|mlm>)."""
    return {path.parent.name: read_artefact(path) for path in paths}


def pairwise_table(reports: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """One row per (checkpoint, pair kind, construction): P-PPL, U-PPL, KL all, KL gold."""
    rows = []
    for name, report in reports.items():
        for kind, part in report["pairwise"].items():
            for row, values in part["rows"].items():
                rows.append({"checkpoint": name, "objective": report["objective"], "kind": kind,
                             "construction": ROW_LABELS.get(row, row), **values})
    return pd.DataFrame(rows).set_index(["kind", "checkpoint", "construction"]).sort_index()


def likelihood_table(reports: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """One row per checkpoint: NLL per target token of the held-out blocks and its perplexity, exact for AR and an
    upper bound for a bidirectional checkpoint (column `kind`), and below_unigram: the train split's unigram NLL of
    the same non-[EOD] targets minus the model's. Rows compare only when they share `blocks_fingerprint` (the same
    token ids: corpus, split, tokenizer, block size and count)."""
    rows = [{"checkpoint": name, "objective": report["objective"],
             **{key: report["likelihood"].get(key) for key in (
                 "kind", "nll_per_token", "ppl", "nll_per_token_without_eod", "unigram_nll_per_token_without_eod",
                 "below_unigram", "mc_stderr", "blocks_stderr", "blocks", "block_size", "target_tokens",
                 "blocks_fingerprint")}}
            for name, report in reports.items() if "likelihood" in report]
    return pd.DataFrame(rows).set_index("checkpoint").sort_index()


def gap_by_distance(report: dict[str, Any], joint: str | None = None) -> pd.DataFrame:
    """Mean independence gap (and its standard error) per distance bin, pooling both pair kinds."""
    distances, gaps = [], []
    for part in report["pairwise"].values():
        chosen = joint or part["headline_joint"]
        distances += part["per_pair"]["distance"]
        gaps += part["per_pair"]["gap"][chosen]
    gaps_tensor = torch.tensor(gaps, dtype=torch.float64)
    out = []
    for low, label, inside in distance_bins(torch.tensor(distances)):
        members = gaps_tensor[inside]
        sem = (members.std() / math.sqrt(len(members))).item() if len(members) > 1 else float("nan")
        out.append({"low": low, "bin": label, "pairs": len(members), "mean_gap": members.mean().item(), "sem": sem})
    return pd.DataFrame(out)


def plot_gap_by_distance(reports: dict[str, dict[str, Any]], ax: Axes) -> None:
    """Gap against distance for every checkpoint, with ±1 standard error bars."""
    lows = [low for low, _ in DISTANCE_BINS]  # one x position per bin, shared by every checkpoint
    labels: dict[int, str] = {}
    for name, report in reports.items():
        table = gap_by_distance(report)
        labels.update(zip(table["low"], table["bin"]))
        joint = next(iter(report["pairwise"].values()))["headline_joint"]
        ax.errorbar([lows.index(low) for low in table["low"]], table["mean_gap"], yerr=table["sem"].fillna(0),
                    marker="o", capsize=3, label=f"{name}: {report['objective']} ({ROW_LABELS.get(joint, joint)})")
    ax.set_xticks([lows.index(low) for low in sorted(labels)], [labels[low] for low in sorted(labels)])
    ax.axhline(0.0, color="grey", linewidth=0.8)
    ax.set_xlabel("distance |i - j| (subword tokens)")
    ax.set_ylabel("log p(a,b) - log p(a) - log p(b)  (nats)")
    ax.set_title("Dependence between two tokens that a factorised prediction discards")
    ax.legend(fontsize=8)
