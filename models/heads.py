"""Heads that objectives and fine-tuning tasks put on the backbone's hidden states.

The LM head is not here: it is tied to the token embedding and lives on the backbone
(`Transformer.logits`), shared by every language-modelling objective.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from armlm.common.errors import ArmlmError

POOLINGS = ("first", "last", "mean")


def pool(hidden: Tensor, attention_mask: Tensor, how: str) -> Tensor:
    """One vector per sequence from (B, T, d) states: the first token ([CLS]), the last non-pad token (the
    only one a causal model lets see the whole input) or the mean over non-pad tokens."""
    if how == "first":
        return hidden[:, 0]
    mask = attention_mask.to(hidden.dtype)
    if how == "last":
        last = attention_mask.long().sum(dim=1) - 1  # right padding: the last real token
        return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]
    if how == "mean":
        return (hidden * mask[..., None]).sum(dim=1) / mask.sum(dim=1, keepdim=True).clamp(min=1)
    raise ArmlmError(f"pooling {how!r} is not one of {POOLINGS}")


class ClassificationHead(nn.Module):
    """BERT's pooler (dense + tanh) followed by a linear layer, applied to one pooled state.
    With one output it is a regression head (STS-B)."""

    def __init__(self, d_model: int, n_outputs: int, dropout: float = 0.1) -> None:
        super().__init__()
        self.pool = nn.Sequential(nn.Linear(d_model, d_model), nn.Tanh(), nn.Dropout(dropout))
        self.classifier = nn.Linear(d_model, n_outputs)

    def forward(self, pooled: Tensor) -> Tensor:
        return self.classifier(self.pool(pooled))


class TaggingHead(nn.Module):
    """Per-token tag logits. Over one layer it is BERT's linear tagger; over the concatenation of several
    layers (the feature-based setting) a hidden layer first mixes them. A position-wise head keeps the
    backbone's attention mode intact: a BiLSTM here would hand a causal backbone right context."""

    def __init__(self, d_model: int, n_tags: int, n_layers: int = 1, dropout: float = 0.1) -> None:
        super().__init__()
        width = d_model * n_layers
        hidden = [nn.Linear(width, d_model), nn.GELU(), nn.Dropout(dropout)] if n_layers > 1 else []
        self.net = nn.Sequential(nn.Dropout(dropout), *hidden, nn.Linear(d_model, n_tags))

    def forward(self, states: Tensor) -> Tensor:
        return self.net(states)


class ScalarMix(nn.Module):
    """ELMo's task-specific layer mix (Peters et al. 2018, eq. 1): gamma * sum_j softmax(s)_j h_j over every
    layer, the weights s and the scale gamma learned by the task. Starting from equal weights and gamma = 1."""

    def __init__(self, n_layers: int) -> None:
        super().__init__()
        self.weights = nn.Parameter(torch.zeros(n_layers))
        self.gamma = nn.Parameter(torch.ones(()))

    def forward(self, layers: list[Tensor]) -> Tensor:
        if len(layers) != self.weights.numel():
            raise ArmlmError(f"the mix was built for {self.weights.numel()} layers, got {len(layers)}")
        weights = torch.softmax(self.weights, dim=0)
        return self.gamma * torch.einsum("l,l...->...", weights.to(layers[0].dtype), torch.stack(layers))
