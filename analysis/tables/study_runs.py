"""What a study's findings read, once per study folder: every pretraining summary, fine-tuning result and report,
one entry per (arm, pretraining seed), and the fine-tuned scores a side asks of them (analysis.findings.quantities)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from armlm.analysis.tables import study_tables as S
from armlm.analysis.tables.runs import FINETUNE_SEED_SUFFIX
from armlm.common.errors import ArmlmError
from armlm.common.scalars import run_scalars
from armlm.finetune.artefacts import metric_tag


@dataclass
class StudyRuns:
    """What the findings read, one entry per (arm, pretraining seed)."""

    pretraining: pd.DataFrame  # analysis.tables.study_tables.pretraining_runs
    finetuning: pd.DataFrame  # analysis.tables.study_tables.per_checkpoint (median over fine-tuning seeds)
    reports: dict[tuple[str, int], dict[str, Any]]  # diagnostics.json per arm and seed
    zeroshot: dict[tuple[str, int], dict[str, Any]]  # zeroshot.json per arm and seed
    words: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)  # words.json per arm and seed
    root: Path | None = None  # the study folder, where sides read per-run files (epoch scores, items.json)

    @staticmethod
    def read(root: Path) -> StudyRuns:
        return StudyRuns(S.pretraining_runs(root), S.per_checkpoint(S.finetuning_runs(root)),
                         *(S.stage_reports(root, r) for r in (S.DIAGNOSTICS, S.ZEROSHOT, S.WORDS)), root)

    def pretraining_rows(self, arm: str) -> pd.DataFrame:
        return self.pretraining[self.pretraining["arm"] == arm] if not self.pretraining.empty else pd.DataFrame()


class NotComparable(ValueError):
    """A quantity exists but must not be compared across checkpoints (e.g. restricted candidate sets)."""


def scores(runs: StudyRuns, arm: str, task_variant: str, metric: str, split: str | None,
           column: str = "value") -> dict[int, float]:
    """seed -> the fine-tuned dev score (or, column="baseline", the majority-class baseline of the same metric)."""
    f = runs.finetuning
    if f.empty:
        return {}
    task, _, variant = task_variant.partition("-")
    rows = f[(f["arm"] == arm) & (f["task"] == task) & (f["variant"] == variant) & (f["metric"] == metric)]
    if split is not None:
        rows = rows[rows["split"] == split]
    elif rows["split"].nunique() > 1:
        raise ArmlmError(f"{task_variant} has several dev splits {sorted(rows['split'].unique())}; name one with split:")
    return {int(seed): float(value) for seed, value in zip(rows["seed"], rows[column])}


def epoch_scores(runs: StudyRuns, arm: str, task_variant: str, metric: str, split: str | None,
                 epoch: int) -> dict[int, float]:
    """seed -> the dev score logged at the end of fine-tuning epoch `epoch` (1-based), the median over the
    checkpoint's fine-tuning runs: read from each run's scalars (TensorBoard, or a record's scalars.csv)."""
    if runs.root is None:
        raise ArmlmError("a side that reads an epoch (epoch:) needs the study folder's runs")
    task = task_variant.partition("-")[0]
    tag = metric_tag(task, split or "validation", metric)
    out = {}
    for seed_folder in sorted(runs.root.glob(f"{arm}/seed*")):
        found = []
        for folder in sorted((seed_folder / "finetune").glob(f"{task_variant}*")):
            if folder.name != task_variant and not folder.name.startswith(task_variant + FINETUNE_SEED_SUFFIX):
                continue
            frame = run_scalars(folder)
            if tag not in frame or "epoch" not in frame:
                raise ArmlmError(f"{folder} logged no {tag!r} by epoch; its tags are {sorted(frame.columns)}")
            logged = frame[tag].dropna()
            at = logged[frame["epoch"].reindex(logged.index).to_numpy() == epoch - 1]
            if at.empty:
                raise ArmlmError(f"{folder} has no {tag} after epoch {epoch} (it logged epochs "
                                 f"{sorted({int(e) + 1 for e in frame['epoch'].reindex(logged.index).dropna()})})")
            found.append(float(at.iloc[-1]))
        if found:
            out[int(seed_folder.name.removeprefix("seed"))] = float(np.median(found))
    return out
