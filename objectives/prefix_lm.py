"""Prefix LM (T5, Raffel et al. 2020, section 3.2.1; UL2): per row a prefix seen bidirectionally, the rest
causally, and next-token prediction of the rest (the suffix) only."""

from __future__ import annotations

import torch
from torch import Tensor

from armlm.common.errors import ArmlmError
from armlm.models.attention import Attention
from armlm.models.backbone import Transformer
from armlm.models.rows import flops_rows, take
from armlm.objectives.base import IGNORE_INDEX, Batch, LossOutput, Objective, mean_or_zero, summed_token_nll


class PrefixLM(Objective):
    """Each row's prefix holds [CLS] and the first n of its ordinary positions, n an integer drawn uniformly
    between min_share and max_share x (the row's tokens after [CLS]); the prefix attends bidirectionally within itself,
    every later position causally. The loss is next-token NLL of the suffix tokens, each predicted from the
    position before it (the prefix's last position predicts the first suffix token, having seen the prefix only).

    Fine-tuned and diagnosed, the whole input is the prefix (bidirectional attention); its chain-rule scores
    use causal attention, the prefix of length one (only [CLS]) that training also draws when min_share is 0."""

    pretraining_attention = "prefix"
    finetune_attention = "bidirectional"
    scoring = "chain_rule"
    masked_conditionals = False
    reference = "Raffel et al. 2020 (T5's prefix LM)"
    val_loss_kind = "suffix_next_token"  # the suffix's tokens only: fewer and easier than AR's every token
    extra_metrics = ("prefix_share",)

    def __init__(self, min_share: float = 0.0, max_share: float = 1.0) -> None:
        super().__init__()
        for name, value in (("min_share", min_share), ("max_share", max_share)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                raise ArmlmError(f"objective.{name}={value!r} must be a number in [0, 1]: a share of each row's "
                                 "tokens after [CLS]")
        if min_share > max_share or min_share >= 1.0:
            raise ArmlmError(f"objective.min_share={min_share} must be <= max_share={max_share} and < 1, so "
                             "some rows keep a suffix to predict")
        self.min_share, self.max_share = float(min_share), float(max_share)

    def prefix_lengths(self, batch: Batch, generator: torch.Generator | None = None) -> Tensor:
        """(B,) prefix lengths in positions, [CLS] included: 1 + n, n uniform over the integers from
        ceil(min_share x ordinary) to floor(max_share x ordinary), both capped at ordinary - 1 so a suffix token is
        always left (capping the range, not the draw, keeps the longest prefix as likely as any other)."""
        input_ids = batch["input_ids"]
        mask = batch.get("attention_mask")
        length = (torch.full((input_ids.shape[0],), input_ids.shape[1], device=input_ids.device) if mask is None
                  else mask.sum(-1))
        ordinary = (length - 1).double()
        most = (ordinary - 1).clamp(min=0)
        high = torch.minimum(torch.floor(self.max_share * ordinary), most)
        low = torch.minimum(torch.ceil(self.min_share * ordinary), high)
        u = torch.rand(input_ids.shape[0], generator=generator, device=input_ids.device, dtype=torch.float64)
        return 1 + (low + torch.floor(u * (high - low + 1))).long()

    def loss(self, batch: Batch, model: Transformer, generator: torch.Generator | None = None) -> LossOutput:
        input_ids = batch["input_ids"]
        attention_mask = batch.get("attention_mask")
        lengths = self.prefix_lengths(batch, generator)
        attention = Attention.prefix(lengths).within(batch.get("document_ids"))
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        # Target t + 1 is predicted at position t; it is a suffix token when t + 1 >= the prefix length.
        in_suffix = positions[None, 1:] >= lengths[:, None]
        targets = input_ids[:, 1:].masked_fill(~in_suffix, IGNORE_INDEX)
        if attention_mask is not None:
            targets = targets.masked_fill(attention_mask[:, 1:] == 0, IGNORE_INDEX)
        # (B, T): the target each position's state predicts, IGNORE_INDEX at the last and wherever none is
        targets = torch.cat([targets, torch.full_like(targets[:, :1], IGNORE_INDEX)], dim=1)
        predicting = targets != IGNORE_INDEX
        states = model(input_ids, attention=attention, attention_mask=attention_mask,
                       token_type_ids=batch.get("token_type_ids"), output_mask=predicting)
        nll_sum, n_predicted = summed_token_nll(model, states, take(targets, predicting, IGNORE_INDEX))
        inputs = self.input_token_count(batch)
        prefix_tokens = lengths.sum() - lengths.shape[0]  # ordinary positions inside the prefixes
        return LossOutput(
            loss=mean_or_zero(nll_sum, n_predicted),
            lm_nll_sum=nll_sum.detach(),
            predicted_tokens=n_predicted,
            input_tokens=inputs,
            forward_flops=model.forward_flops(input_ids, attention, attention_mask=attention_mask,
                                              output_rows=flops_rows(predicting), vocab_rows=flops_rows(predicting)),
            extras={"prefix_share": (prefix_tokens / (inputs - lengths.shape[0]).clamp(min=1), lengths.shape[0])},
        )
