"""BERT's original pretraining: masked LM plus next-sentence prediction on [CLS] A [SEP] B [SEP] pairs."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from armlm.common.errors import ArmlmError
from armlm.models.backbone import Transformer
from armlm.models.flops import linear_flops
from armlm.models.heads import ClassificationHead
from armlm.models.rows import every_row
from armlm.objectives.base import Batch, LossOutput, mean_or_zero
from armlm.objectives.mlm import MaskedLM, mask_share


class MaskedLMWithNSP(MaskedLM):
    input_format = "segment_pairs"
    reference = "Devlin et al. 2019 (BERT, with next-sentence prediction)"
    extra_metrics = ("mlm_loss", "nsp_loss", "nsp_acc", "mask_share")

    def __init__(self, d_model: int, mlm_weight: float = 1.0, nsp_weight: float = 1.0, **masking: Any) -> None:
        """`masking`: MaskedLM's settings (mask_rate, mask_prob, random_prob, keep_prob, replacement)."""
        super().__init__(**masking)
        if mlm_weight < 0 or nsp_weight < 0 or mlm_weight + nsp_weight == 0:
            raise ArmlmError(f"objective.mlm_weight={mlm_weight}, nsp_weight={nsp_weight}: use weights >= 0, not both 0")
        self.mlm_weight, self.nsp_weight = mlm_weight, nsp_weight
        self.nsp_head = ClassificationHead(d_model, 2)

    def loss(self, batch: Batch, model: Transformer, generator: torch.Generator | None = None) -> LossOutput:
        first = torch.zeros_like(batch["input_ids"], dtype=torch.bool)
        first[:, 0] = True  # the [CLS] position, whose state the NSP head reads
        out = self.masked_lm(batch, model, generator, also=first)
        inputs = self.input_token_count(batch)
        mlm_loss = mean_or_zero(out.nll_sum, out.n_predicted)
        # one [CLS] row per sequence, in order; a compiled step keeps every row (models.rows), [CLS] first in each
        cls_states = out.states.view(*first.shape, -1)[:, 0] if every_row() else out.states[first[out.positions]]
        nsp_logits = self.nsp_head(cls_states).float()
        labels = batch["nsp_labels"]
        nsp_loss = F.cross_entropy(nsp_logits, labels)
        nsp_acc = (nsp_logits.argmax(-1) == labels).float().mean()
        n = labels.numel()
        return LossOutput(
            loss=self.mlm_weight * mlm_loss + self.nsp_weight * nsp_loss,
            lm_nll_sum=out.nll_sum.detach(),
            predicted_tokens=out.n_predicted,
            input_tokens=inputs,
            forward_flops=out.forward_flops + linear_flops(self.nsp_head, n),
            extras={"mlm_loss": (mlm_loss.detach(), out.n_predicted), "nsp_loss": (nsp_loss.detach(), n),
                    "nsp_acc": (nsp_acc, n), "mask_share": mask_share(out.n_masked, inputs)},
        )
