"""Autoregressive LM: next-token prediction with causal attention."""

from __future__ import annotations

import torch

from armlm.models.attention import CAUSAL
from armlm.models.backbone import Transformer
from armlm.models.rows import flops_rows
from armlm.objectives.base import IGNORE_INDEX, Batch, LossOutput, Objective, mean_or_zero, summed_token_nll


def next_token_loss(batch: Batch, model: Transformer) -> LossOutput:
    """Causal attention, every position predicting the token after it ([EOD] included, padding never): AR's loss,
    and GPT-BERT's causal batches (objectives.hybrid)."""
    input_ids = batch["input_ids"]
    attention_mask = batch.get("attention_mask")
    attention = CAUSAL.within(batch.get("document_ids"))
    hidden = model(input_ids, attention=attention, attention_mask=attention_mask,
                   token_type_ids=batch.get("token_type_ids"))
    # Position t predicts token t + 1; the last position has no target inside the block.
    targets = input_ids[:, 1:]
    if attention_mask is not None:
        targets = targets.masked_fill(attention_mask[:, 1:] == 0, IGNORE_INDEX)
    nll_sum, n_predicted = summed_token_nll(model, hidden[:, :-1], targets)
    return LossOutput(
        loss=mean_or_zero(nll_sum, n_predicted),
        lm_nll_sum=nll_sum.detach(),
        predicted_tokens=n_predicted,
        input_tokens=Objective.input_token_count(batch),
        forward_flops=model.forward_flops(input_ids, attention, attention_mask=attention_mask,
                                          vocab_rows=flops_rows(targets != IGNORE_INDEX)),
    )


class AutoregressiveLM(Objective):
    pretraining_attention = "causal"
    finetune_attention = "causal"
    scoring = "chain_rule"
    masked_conditionals = False
    reference = "Radford et al. 2019 (GPT-2)"
    babylm_backend = "causal"
    val_loss_kind = "next_token"  # every next token of the block, [EOD] included
    likelihood_metric = "loss"  # the exact NLL per target token

    def loss(self, batch: Batch, model: Transformer, generator: torch.Generator | None = None) -> LossOutput:
        return next_token_loss(batch, model)
