"""Official metrics: GLUE with torchmetrics, CoNLL-2003 entity F1 with seqeval on words (as conlleval)."""

from __future__ import annotations

from seqeval.metrics import classification_report, f1_score, precision_score, recall_score
from torchmetrics import Accuracy, F1Score, MatthewsCorrCoef, MetricCollection, PearsonCorrCoef, SpearmanCorrCoef

from datamodules.glue import GlueTask


def glue_metrics(task: GlueTask) -> MetricCollection:
    """CoLA: Matthews correlation; MRPC, QQP: F1 and accuracy; STS-B: Pearson and Spearman; others: accuracy.
    Update with predicted class ids (or scores, for STS-B) and the gold labels."""
    if task.is_regression:
        return MetricCollection({"pearson": PearsonCorrCoef(), "spearman": SpearmanCorrCoef()})
    if task.name == "cola":
        return MetricCollection({"mcc": MatthewsCorrCoef(task="binary")})
    accuracy = Accuracy(task="multiclass", num_classes=len(task.labels))
    if task.name in ("mrpc", "qqp"):
        return MetricCollection({"f1": F1Score(task="binary"), "accuracy": accuracy})
    return MetricCollection({"accuracy": accuracy})


def entity_scores(gold: list[list[str]], predicted: list[list[str]]) -> dict[str, float]:
    """Entity-level micro precision / recall / F1 and per-type F1 over word-level IOB2 tag sequences."""
    if len(gold) != len(predicted) or any(len(g) != len(p) for g, p in zip(gold, predicted)):
        raise ValueError("gold and predicted tag sequences must have the same sentences and lengths")
    scores = {"f1": f1_score(gold, predicted), "precision": precision_score(gold, predicted),
              "recall": recall_score(gold, predicted)}
    report = classification_report(gold, predicted, output_dict=True, zero_division=0)
    scores |= {f"f1_{name}": values["f1-score"] for name, values in report.items() if "avg" not in name}
    return {k: float(v) for k, v in scores.items()}
