"""Objectives and batches the objective and module tests share: blocks of token ids and row mixtures of objectives,
and the attention FLOPs a causal kernel skips (what the FLOP counter counts beyond models.flops)."""

from __future__ import annotations

import torch

from armlm.models.attention import Attention, attention_share
from armlm.models.backbone import ModelConfig
from armlm.objectives.hybrid import HybridLM
from armlm.objectives.mixture import RowMixture


def blocks(vocab, rows=8, length=20):
    ids = torch.randint(6, vocab.size, (rows, length), generator=torch.Generator().manual_seed(1))
    ids[:, 0] = vocab.cls_id
    return ids


def mixture(vocab, cls=RowMixture, **weights_and_parts):
    components = {name: {"weight": weight, "objective": part} for name, (weight, part) in weights_and_parts.items()}
    objective = cls(components) if cls is HybridLM else cls(components, answers_as=next(iter(components)))
    objective.set_vocabulary(vocab)
    return objective


def skipped_causal_half(config: ModelConfig, input_ids: torch.Tensor, attention: Attention,
                        attention_mask: torch.Tensor | None) -> float:
    """The attention FLOPs models.flops leaves out for a kernel that skips the causal upper triangle; the
    flop counter (run on SDPA's math backend) counts the full T x T scores, so the test adds them back."""
    if attention_share(attention, attention_mask, device_type="cpu", dtype=torch.float32, length=input_ids.shape[1],
                       dropout=0.0) == 1.0:
        return 0.0
    b, t = input_ids.shape
    return 0.5 * 4 * config.n_layers * b * t * t * config.d_model
