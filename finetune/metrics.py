"""Official metrics: GLUE with torchmetrics, CoNLL-2003 entity F1 with seqeval on words (as conlleval).

A task's config lists its metrics (task.metrics: name -> a Hydra `_target_` spec of a factory here); each factory
takes the task's labels (class or tag names in id order, empty for regression) and returns a torchmetrics Metric,
updated with the predictions and gold labels FinetuneModule.predictions gives (class ids, scores or word tags)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from hydra.utils import instantiate
from seqeval.metrics import classification_report, f1_score, precision_score, recall_score
from seqeval.metrics.sequence_labeling import get_entities
from torch import Tensor
from torchmetrics import Accuracy, F1Score, Metric, MetricCollection, PearsonCorrCoef, SpearmanCorrCoef
from torchmetrics.classification import BinaryMatthewsCorrCoef

from armlm.common.errors import ArmlmError
from armlm.common.vocabulary import IGNORE_INDEX
from armlm.datamodules.finetune import TaskInfo


class MatthewsCorrelation(BinaryMatthewsCorrCoef):
    """Matthews correlation with the convention of scikit-learn, which GLUE's scorer uses: 0 when the
    predictions or the labels are constant. torchmetrics returns a small eps-based value there instead
    (0.026 for predicting 'acceptable' on every CoLA dev sentence), which would flatter a collapsed model."""

    def compute(self) -> Tensor:
        if (self.confmat.sum(dim=0) == 0).any() or (self.confmat.sum(dim=1) == 0).any():
            return torch.tensor(0.0, device=self.confmat.device)
        return super().compute()


def _binary(labels: Sequence[str], metric: str) -> None:
    if len(labels) != 2:
        raise ArmlmError(f"the {metric} metric scores two classes (label 1 positive); the task's labels are "
                         f"{list(labels)}")


def matthews(labels: Sequence[str]) -> Metric:
    """Matthews correlation of a binary task (CoLA), 0 for constant predictions as GLUE's scorer."""
    _binary(labels, "matthews")
    return MatthewsCorrelation()


def binary_f1(labels: Sequence[str]) -> Metric:
    """F1 of the positive class (label id 1), as GLUE reports it for MRPC and QQP."""
    _binary(labels, "binary_f1")
    return F1Score(task="binary")


def accuracy(labels: Sequence[str]) -> Metric:
    if not labels:
        raise ArmlmError("the accuracy metric needs class labels; a regression task (no labels) takes pearson/spearman")
    return Accuracy(task="multiclass", num_classes=len(labels))


def pearson(labels: Sequence[str]) -> Metric:
    """Pearson correlation of predicted and gold scores (regression: the task has no labels)."""
    return PearsonCorrCoef()


def spearman(labels: Sequence[str]) -> Metric:
    return SpearmanCorrCoef()


def entity_f1(labels: Sequence[str]) -> Metric:
    """Entity-level scores of IOB2 word tags (the labels are the tag names): f1, precision, recall, f1_<TYPE>."""
    if "O" not in labels:
        raise ArmlmError(f"the entity_f1 metric reads IOB2 tags, with an 'O'; the task has labels {list(labels)}")
    return EntityF1(tuple(labels))


def build_metric(spec: Mapping[str, Any], labels: Sequence[str]) -> Metric:
    """One entry of task.metrics: its factory called with its other arguments and the task's labels."""
    metric = instantiate({**spec, "_partial_": True, "_convert_": "all"})(labels=tuple(labels))
    if not isinstance(metric, Metric):
        raise ArmlmError(f"task.metrics entry {dict(spec)} gave a {type(metric).__name__}, not a torchmetrics Metric")
    return metric


def entity_scores(gold: list[list[str]], predicted: list[list[str]]) -> dict[str, float]:
    """Entity-level micro precision / recall / F1 and per-type F1 over word-level IOB2 tag sequences."""
    if len(gold) != len(predicted) or any(len(g) != len(p) for g, p in zip(gold, predicted)):
        raise ArmlmError("gold and predicted tag sequences must have the same sentences and lengths")
    # No entity predicted (or none in gold) scores 0, as conlleval does, without a warning per evaluation.
    scores = {"f1": f1_score(gold, predicted, zero_division=0),
              "precision": precision_score(gold, predicted, zero_division=0),
              "recall": recall_score(gold, predicted, zero_division=0)}
    report = classification_report(gold, predicted, output_dict=True, zero_division=0)
    scores |= {f"f1_{name}": values["f1-score"] for name, values in report.items() if "avg" not in name}
    return {k: float(v) for k, v in scores.items()}


# What one dev sentence contributes to entity-level micro F1: entities found (true positives), predicted but not
# gold (false positives), gold but missed (false negatives). Summed over any set of sentences they give that set's
# F1, 2 tp / (2 tp + fp + fn): what a bootstrap over dev sentences recomputes (analysis.findings.items).
ITEM_STATISTICS = ("tp", "fp", "fn")


def entity_counts(gold: list[list[str]], predicted: list[list[str]]) -> list[list[int]]:
    """[tp, fp, fn] of each sentence, entities matched exactly (type, first word, last word) as seqeval does."""
    if len(gold) != len(predicted):
        raise ArmlmError("gold and predicted tag sequences must have the same sentences")
    counts = []
    for g, p in zip(gold, predicted):
        gold_spans, predicted_spans = set(get_entities(g)), set(get_entities(p))
        found = len(gold_spans & predicted_spans)
        counts.append([found, len(predicted_spans) - found, len(gold_spans) - found])
    return counts


class EntityF1(Metric):

    """seqeval entity scores as a torchmetrics Metric, so DDP ranks gather their sentences before scoring.

    Update with word-level tag ids (B, W), predicted and gold; gold IGNORE_INDEX marks padding words."""

    full_state_update = False
    item_statistics = ITEM_STATISTICS  # per dev sentence (item_counts), from which the score below is recomputed
    item_score = "f1"

    def __init__(self, tags: tuple[str, ...]) -> None:
        super().__init__()
        self.tags = tags
        self.add_state("predicted", default=[], dist_reduce_fx="cat")
        self.add_state("gold", default=[], dist_reduce_fx="cat")
        self.add_state("lengths", default=[], dist_reduce_fx="cat")

    def update(self, predicted: Tensor, gold: Tensor) -> None:
        real = gold != IGNORE_INDEX
        self.predicted.append(predicted[real])
        self.gold.append(gold[real])
        self.lengths.append(real.sum(dim=1))

    def _sentences(self, flat: list[Tensor] | Tensor) -> list[list[str]]:
        lengths = (torch.cat(self.lengths) if isinstance(self.lengths, list) else self.lengths).tolist()
        ids = (torch.cat(flat) if isinstance(flat, list) else flat).tolist()
        out, start = [], 0
        for n in lengths:
            out.append([self.tags[i] for i in ids[start:start + n]])
            start += n
        return out

    def item_counts(self) -> list[list[int]]:
        """Each sentence's [tp, fp, fn] (ITEM_STATISTICS), in dev-set order: the F1 of any resample of sentences."""
        return entity_counts(self._sentences(self.gold), self._sentences(self.predicted))

    def compute(self) -> dict[str, Tensor]:
        scores = entity_scores(self._sentences(self.gold), self._sentences(self.predicted))
        # Every tag type is reported, found or not, so runs always log the same set of tags.
        types = sorted({t[2:] for t in self.tags if t != "O"})
        return {name: torch.tensor(scores.get(name, 0.0)) for name in
                ("f1", "precision", "recall", *(f"f1_{t}" for t in types))}


def task_metrics(info: TaskInfo) -> MetricCollection:
    """The task's metrics, in the order its config lists them; a metric that computes several values (EntityF1)
    logs them under their own names (f1, precision, ...)."""
    return MetricCollection({name: build_metric(spec, info.labels) for name, spec in info.metrics.items()})


def item_record(info: TaskInfo, module: Any, clusters: dict[str, list[int]] | None = None) -> dict[str, Any]:
    """items.json: for each metric that gives per-item statistics, their names and the score they give; for each
    dev split, one list per evaluation (after each epoch) of every dev item's values, in dev-set order, and (where
    the task has them, `clusters`) the cluster each item was drawn in: a bootstrap resamples clusters whole. Empty
    where no metric gives any."""
    if not module.item_scores:
        return {}
    metrics = {name: {"statistics": list(metric.item_statistics), "score": metric.item_score}
               for collection in module.val_metrics for name, metric in collection.items()
               if hasattr(metric, "item_statistics")}
    kept = {split: list(c) for split, c in (clusters or {}).items() if split in module.item_scores}
    return {"task": info.name, "metrics": metrics, "splits": module.item_scores, **({"clusters": kept} if kept else {})}
