"""Official metrics: GLUE with torchmetrics, CoNLL-2003 entity F1 with seqeval on words (as conlleval)."""

from __future__ import annotations

import torch
from seqeval.metrics import classification_report, f1_score, precision_score, recall_score
from torch import Tensor
from torchmetrics import Accuracy, F1Score, Metric, MetricCollection, PearsonCorrCoef, SpearmanCorrCoef
from torchmetrics.classification import BinaryMatthewsCorrCoef

from common.vocabulary import IGNORE_INDEX
from datamodules.finetune import TaskInfo
from datamodules.glue import GlueTask, get_task


class MatthewsCorrelation(BinaryMatthewsCorrCoef):
    """Matthews correlation with the convention of scikit-learn, which GLUE's scorer uses: 0 when the
    predictions or the labels are constant. torchmetrics returns a small eps-based value there instead
    (0.026 for predicting 'acceptable' on every CoLA dev sentence), which would flatter a collapsed model."""

    def compute(self) -> Tensor:
        if (self.confmat.sum(dim=0) == 0).any() or (self.confmat.sum(dim=1) == 0).any():
            return torch.tensor(0.0, device=self.confmat.device)
        return super().compute()


def glue_metrics(task: GlueTask) -> MetricCollection:
    """CoLA: Matthews correlation; MRPC, QQP: F1 and accuracy; STS-B: Pearson and Spearman; others: accuracy.
    Update with predicted class ids (or scores, for STS-B) and the gold labels."""
    if task.is_regression:
        return MetricCollection({"pearson": PearsonCorrCoef(), "spearman": SpearmanCorrCoef()})
    if task.name == "cola":
        return MetricCollection({"mcc": MatthewsCorrelation()})
    accuracy = Accuracy(task="multiclass", num_classes=len(task.labels))
    if task.name in ("mrpc", "qqp"):
        return MetricCollection({"f1": F1Score(task="binary"), "accuracy": accuracy})
    return MetricCollection({"accuracy": accuracy})


def entity_scores(gold: list[list[str]], predicted: list[list[str]]) -> dict[str, float]:
    """Entity-level micro precision / recall / F1 and per-type F1 over word-level IOB2 tag sequences."""
    if len(gold) != len(predicted) or any(len(g) != len(p) for g, p in zip(gold, predicted)):
        raise ValueError("gold and predicted tag sequences must have the same sentences and lengths")
    # No entity predicted (or none in gold) scores 0, as conlleval does, without a warning per evaluation.
    scores = {"f1": f1_score(gold, predicted, zero_division=0),
              "precision": precision_score(gold, predicted, zero_division=0),
              "recall": recall_score(gold, predicted, zero_division=0)}
    report = classification_report(gold, predicted, output_dict=True, zero_division=0)
    scores |= {f"f1_{name}": values["f1-score"] for name, values in report.items() if "avg" not in name}
    return {k: float(v) for k, v in scores.items()}


class EntityF1(Metric):
    """seqeval entity scores as a torchmetrics Metric, so DDP ranks gather their sentences before scoring.

    Update with word-level tag ids (B, W), predicted and gold; gold IGNORE_INDEX marks padding words."""

    full_state_update = False

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

    def compute(self) -> dict[str, Tensor]:
        def sentences(flat: list[Tensor] | Tensor) -> list[list[str]]:
            ids = (torch.cat(flat) if isinstance(flat, list) else flat).tolist()
            out, start = [], 0
            for n in lengths:
                out.append([self.tags[i] for i in ids[start:start + n]])
                start += n
            return out

        lengths = (torch.cat(self.lengths) if isinstance(self.lengths, list) else self.lengths).tolist()
        scores = entity_scores(sentences(self.gold), sentences(self.predicted))
        # Every tag type is reported, found or not, so runs always log the same set of tags.
        types = sorted({t[2:] for t in self.tags if t != "O"})
        return {name: torch.tensor(scores.get(name, 0.0)) for name in
                ("f1", "precision", "recall", *(f"f1_{t}" for t in types))}


def task_metrics(info: TaskInfo) -> MetricCollection:
    """The official metrics of a fine-tuning task."""
    if info.kind == "tagging":
        return MetricCollection({"entities": EntityF1(info.labels)})
    return glue_metrics(get_task(info.name))
