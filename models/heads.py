"""Heads that objectives (and later fine-tuning tasks) put on the backbone's hidden states.

The LM head is not here: it is tied to the token embedding and lives on the backbone
(`Transformer.logits`), shared by every language-modelling objective.
"""

from __future__ import annotations

from torch import Tensor, nn


class ClassificationHead(nn.Module):
    """BERT's pooler (dense + tanh) followed by a linear classifier, applied to one pooled state."""

    def __init__(self, d_model: int, n_classes: int, dropout: float = 0.1) -> None:
        super().__init__()
        self.pool = nn.Sequential(nn.Linear(d_model, d_model), nn.Tanh(), nn.Dropout(dropout))
        self.classifier = nn.Linear(d_model, n_classes)

    def forward(self, pooled: Tensor) -> Tensor:
        return self.classifier(self.pool(pooled))
