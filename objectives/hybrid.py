"""GPT-BERT (Charpentier & Samuel 2024): masked next-token prediction. Masked batches are BERT's, except that a
masked token is predicted from the position before it, as a causal LM predicts its next token, so one head
serves both; a share of the batches (1 in 16 by default, the paper's 1:15) are plain causal LM batches."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from models.backbone import Transformer
from objectives.ar import next_token_loss
from objectives.base import IGNORE_INDEX, Batch, LossOutput, mean_or_zero, summed_token_nll
from objectives.mlm import MaskedLM, mask_share


class HybridLM(MaskedLM):
    """Per batch: with probability `causal_share` a causal batch (objectives.ar.next_token_loss), else a masked
    one: spans of `span_length` ordinary positions selected to cover about `mask_rate` of them, corrupted as
    MaskedLM corrupts (mask / random / keep), the backbone attending bidirectionally; the token at a selected
    position i is predicted from the state at i - 1 (shifted targets). val/loss averages both kinds' predicted
    tokens, the validation batches' kinds drawn from the fixed validation seed, so it compares across checkpoints
    of runs with the same settings."""

    pretraining_attention = "bidirectional"  # the masked batches': most of them
    finetune_attention = "bidirectional"
    scoring = "chain_rule"  # its causal batches train a left-to-right LM: exact chain-rule scores and sampling
    reference = "Charpentier and Samuel 2024 (GPT-BERT)"
    val_loss_kind = "mixed_next_token"
    extra_metrics = ("causal_batch", "mask_share")

    def __init__(self, causal_share: float = 1 / 16, span_length: int = 3, **masking: Any) -> None:
        """`masking`: MaskedLM's settings (mask_rate, mask_prob, random_prob, keep_prob, replacement)."""
        super().__init__(**masking)
        if isinstance(causal_share, bool) or not isinstance(causal_share, (int, float)) or not 0 <= causal_share <= 1:
            raise ValueError(f"objective.causal_share={causal_share!r} must be a probability in [0, 1]: the share of "
                             "batches trained as a causal LM")
        if isinstance(span_length, bool) or not isinstance(span_length, int) or span_length < 1:
            raise ValueError(f"objective.span_length={span_length!r} must be a positive integer (1: single tokens)")
        self.causal_share, self.span_length = float(causal_share), span_length

    def select(self, input_ids: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """Spans of `span_length` positions, each position starting one with probability
        mask_rate / span_length, so about mask_rate of the positions are covered (less where spans overlap)."""
        starts = torch.rand(input_ids.shape, generator=generator, device=input_ids.device) < (
            self.mask_rate / self.span_length)
        covered = starts.clone()
        for shift in range(1, self.span_length):
            covered[:, shift:] |= starts[:, :-shift]
        return covered

    def loss(self, batch: Batch, model: Transformer, generator: torch.Generator | None = None) -> LossOutput:
        device = batch["input_ids"].device
        causal = bool(torch.rand((), generator=generator, device=device) < self.causal_share)
        inputs = self.input_token_count(batch)
        if causal:
            out = next_token_loss(batch, model)
            out.extras = {"causal_batch": (torch.ones((), device=device), 1),
                          "mask_share": mask_share(torch.zeros((), device=device), inputs)}
            return out
        corrupted, labels = self.corrupt(batch["input_ids"], generator)
        # Shifted: the state at i - 1 predicts the token at a selected position i ([CLS] at 0 is never selected).
        targets = labels[:, 1:]
        predicting = torch.cat([targets != IGNORE_INDEX, torch.zeros_like(targets[:, :1], dtype=torch.bool)], dim=1)
        attention = self.attention(batch)
        states = model(corrupted, attention=attention, attention_mask=batch.get("attention_mask"),
                       token_type_ids=batch.get("token_type_ids"), output_mask=predicting)
        nll_sum, n_predicted = summed_token_nll(model, states, targets[targets != IGNORE_INDEX])
        return LossOutput(
            loss=mean_or_zero(nll_sum, n_predicted),
            lm_nll_sum=nll_sum.detach(),
            predicted_tokens=n_predicted,
            input_tokens=inputs,
            forward_flops=model.forward_flops(corrupted, attention, attention_mask=batch.get("attention_mask"),
                                              output_rows=int(n_predicted), vocab_rows=int(n_predicted)),
            extras={"causal_batch": (torch.zeros((), device=device), 1),
                    "mask_share": mask_share((corrupted == self.mask_id).sum(), inputs)},
        )
