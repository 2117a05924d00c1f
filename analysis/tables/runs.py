"""Read pretraining run folders into tables and learning curves.

A run folder is what `train.py` writes: `summary.json`, `tensorboard/` and `.hydra/config.yaml` (when run
through Hydra). Curves are indexed by `train/tokens_seen`, so AR and MLM runs line up on one axis."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from armlm.common.atomic import read_artefact
from armlm.common.errors import ArmlmError
from armlm.common.scalars import run_scalars

# A fine-tuning folder of a study with several fine-tuning seeds per checkpoint: <task>-<variant>-ft<j> is the j-th
# (studies.plan writes them; the reports take their median per checkpoint).
FINETUNE_SEED_SUFFIX = "-ft"

# val_loss_kind says what val_loss averages (next_token for AR, masked_token for MLM): compare val_loss only
# between runs of one kind.
SUMMARY_COLUMNS = ["objective", "steps", "tokens_seen", "pred_tokens_seen", "val_loss_kind", "val_loss", "val_ppl",
                   "unigram_baseline", "wall_seconds"]


def find_runs(root: str | Path) -> list[Path]:
    """Every folder below `root` (or `root` itself) that holds a finished run's summary.json."""
    root = Path(root)
    return sorted(p.parent for p in root.rglob("summary.json"))


def summary_table(runs: list[Path]) -> pd.DataFrame:
    rows = []
    for run in runs:
        summary = read_artefact(run / "summary.json")
        rows.append({"run": run.name, **{k: summary.get(k) for k in SUMMARY_COLUMNS}})
    table = pd.DataFrame(rows, columns=["run", *SUMMARY_COLUMNS])
    table["below_baseline"] = table["unigram_baseline"] - table["val_loss"]
    return table


def curve_by_steps(run: Path, tag: str) -> pd.Series:
    """`tag` by training step (NaN-free), e.g. a validation curve."""
    frame = run_scalars(run)  # TensorBoard's events, or the scalars.csv a study record keeps
    if tag not in frame:
        raise ArmlmError(f"{run} logged no {tag!r}; its tags are {sorted(frame.columns)}")
    return frame[tag].dropna()


def curve_by_tokens(run: Path, tag: str = "val/loss", tokens_tag: str = "train/tokens_seen") -> pd.Series:
    """`tag` against input tokens seen (the shared x-axis of a controlled comparison), or against another
    count such as train/pred_tokens_seen."""
    frame = run_scalars(run)
    tokens = frame[tokens_tag].ffill()
    values = frame[tag].dropna()
    return pd.Series(values.to_numpy(), index=tokens.reindex(values.index).ffill().fillna(0).to_numpy(), name=tag)


def plot_learning_curves(runs: list[Path], tag: str = "val/loss", ax=None):
    import matplotlib.pyplot as plt

    ax = ax or plt.subplots(figsize=(7, 4))[1]
    baseline = None
    for run in runs:
        curve = curve_by_tokens(run, tag)
        summary = json.loads((run / "summary.json").read_text())
        ax.plot(curve.index, curve.to_numpy(), marker="o", label=f"{summary['objective']} ({run.name})")
        baseline = summary.get("unigram_baseline", baseline)
    if baseline is not None and tag == "val/loss":
        ax.axhline(baseline, color="grey", linestyle="--", label="unigram baseline")
    ax.set_xlabel("input tokens seen")
    ax.set_ylabel(tag)
    ax.legend()
    return ax
