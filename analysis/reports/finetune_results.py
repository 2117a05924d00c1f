"""Tabulate fine-tuning runs from their results.json files: one row per run, split and metric, and the
median and spread over seeds (the usual protocol for small-model GLUE scores).

    armlm report finetune multirun/<time>      # after armlm finetune -m task=... seed=1,2,3,4,5
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from armlm.analysis.tables.study_tables import SECONDARY_PREFIXES
from armlm.common.atomic import read_artefact
from armlm.common.errors import ArmlmFileError

# What makes runs the same experiment; everything else (the seed) is what the spread is over.
EXPERIMENT = ["task", "checkpoint", "objective", "mode", "attention", "pooling", "split", "metric"]


def find_results(root: str | Path) -> list[Path]:
    return sorted(Path(root).rglob("results.json"))


def results_table(paths: list[Path]) -> pd.DataFrame:
    """One row per (run, split, metric), with the majority-class baseline beside each score."""
    rows = []
    for path in paths:
        result = read_artefact(path)
        for split, scores in result["metrics"].items():
            for metric, value in scores.items():
                rows.append({
                    "task": result["task"], "checkpoint": result["pretrained"]["checkpoint"],
                    "objective": result["objective"], "mode": result["mode"], "attention": result["attention"],
                    "pooling": result["pooling"] or "-", "split": split, "metric": metric, "seed": result["seed"],
                    "value": value, "baseline": result["majority_baseline"].get(split, {}).get(metric),
                    "wall_seconds": result["wall_seconds"], "run": str(path.parent),
                })
    return pd.DataFrame(rows, columns=[*EXPERIMENT, "seed", "value", "baseline", "wall_seconds", "run"])


def seed_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Median, min, max and standard deviation over seeds of every experiment's metrics."""
    grouped = table.groupby(EXPERIMENT, dropna=False)
    summary = grouped["value"].agg(seeds="count", median="median", min="min", max="max", std="std")
    summary["baseline"] = grouped["baseline"].first()
    return summary.reset_index()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", help="a folder holding fine-tuning runs (searched recursively)")
    parser.add_argument("--all-metrics", action="store_true", help="also per-type NER F1 and precision/recall")
    args = parser.parse_args()
    paths = find_results(args.root)
    if not paths:
        raise ArmlmFileError(f"no results.json under {args.root}; run armlm finetune task=... pretrained=... first")
    summary = seed_summary(results_table(paths))
    if not args.all_metrics:
        summary = summary[~summary["metric"].str.startswith(SECONDARY_PREFIXES)]
    with pd.option_context("display.width", 200, "display.max_columns", 20, "display.max_colwidth", 60,
                           "display.float_format", "{:.4f}".format):
        print(summary.to_string(index=False))

