"""Objectives mixed within every step by rows of the micro-batch, as GPT-BERT mixes masked and causal rows
(objectives.hybrid)."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from armlm.common.errors import ArmlmError
from armlm.models.backbone import Transformer
from armlm.objectives.base import Batch, LossOutput
from armlm.objectives.composite import DOWNSTREAM_ATTRIBUTES, Composite
from armlm.objectives.mlm import mask_share


def apportion(weights: list[float], rows: int) -> list[int]:
    """Rows per component, summing to `rows`: one each first (when there are enough rows), so every component's
    loss is in every step, whose weight in the loss is its configured one whatever its rows; the rest by largest
    remainder (Hamilton) on weight x rows, ties to the earlier component. 32 rows at 15:1 give 30 and 2; 8 give 7
    and 1."""
    total = sum(weights)
    floor = [1 if rows >= len(weights) else 0 for _ in weights]
    spare = rows - sum(floor)
    exact = [max(0.0, w / total * rows - f) for w, f in zip(weights, floor, strict=True)]
    scale = spare / sum(exact) if sum(exact) else 0.0
    exact = [x * scale for x in exact]
    counts = [f + math.floor(x) for f, x in zip(floor, exact, strict=True)]
    by_remainder = sorted(range(len(weights)), key=lambda k: (-(exact[k] - math.floor(exact[k])), k))
    for k in by_remainder[:rows - sum(counts)]:
        counts[k] += 1
    return counts


class RowMixture(Composite):
    """Components as {name: {weight: w, objective: ...}}. Each step the micro-batch's rows are split in order,
    apportion(weights) rows per component (each at least one); each component corrupts, attends and scores its own rows as it would
    alone, and the loss is sum_k w_k loss_k over the components that got rows (weights renormalised over them), each
    loss_k a mean over its own targets as that objective defines it: GPT-BERT's `ratio * masked_loss + (1 - ratio) *
    causal_loss` (ltgoslo/gpt-bert, model_extra.py, Bert.forward). val/loss pools every predicted token of the
    validation batch (the lit module's lm_nll_sum / predicted_tokens); val/loss_<name> is each component's own.

    `answers_as` names the component whose class answers how a checkpoint is fine-tuned and scored; a subclass
    that declares those attributes itself (objectives.hybrid.HybridLM) needs none."""

    setting = "weight"
    components_key = "components"

    def __init__(self, components: dict[str, Any], answers_as: str | None = None) -> None:
        super().__init__(components)
        self.names = list(self.settings)
        if answers_as is not None:
            if answers_as not in self.parts:
                raise ArmlmError(f"objective.answers_as={answers_as!r} is not a component; choose from {self.names}")
            self.answer_as(answers_as, DOWNSTREAM_ATTRIBUTES)
        elif not hasattr(type(self), "finetune_attention"):
            raise ArmlmError(f"objective.answers_as is needed: name the component ({self.names}) whose checkpoints "
                             "this mixture's are fine-tuned and scored like")
        self.answers_as = answers_as
        self.val_loss_kind = "mixture"
        self.likelihood_metric = None  # val/loss pools the components' quantities
        self.extra_metrics = tuple(f"loss_{name}" for name in self.names) + tuple(
            f"{name}_{extra}" for name in self.names for extra in self.parts[name].extra_metrics)
        # [MASK] inputs over every row's input tokens, where some component inserts [MASK]: the pretraining share the
        # studies set beside fine-tuning's (a causal row counts its tokens and no [MASK])
        self.masks_inputs = any("mask_share" in part.extra_metrics for part in self.parts.values())
        if self.masks_inputs:
            self.extra_metrics += ("mask_share",)
        self.perplexity_of = {}

    @property
    def target_scopes(self) -> tuple[str, ...]:
        return tuple(self.names)  # each component's targets, gated against its own val/loss_<name>

    def row_counts(self, rows: int) -> dict[str, int]:
        return dict(zip(self.names, apportion([self.settings[n] for n in self.names], rows), strict=True))

    @staticmethod
    def rows_of(batch: Batch, start: int, stop: int) -> Batch:
        """The batch's rows start..stop-1: every per-row tensor sliced alike."""
        rows = batch["input_ids"].shape[0]
        return {key: value[start:stop] if isinstance(value, Tensor) and value.dim() and value.shape[0] == rows
                else value for key, value in batch.items()}

    def loss(self, batch: Batch, model: Transformer, generator: torch.Generator | None = None) -> LossOutput:
        outputs, start = {}, 0
        for name, count in self.row_counts(batch["input_ids"].shape[0]).items():
            if count:
                with model.target_scope(name):
                    outputs[name] = self.parts[name].loss(self.rows_of(batch, start, start + count), model, generator)
            start += count
        weight = sum(self.settings[name] for name in outputs)
        extras: dict[str, tuple[Tensor, Tensor | int]] = {}
        for name, out in outputs.items():
            extras[f"loss_{name}"] = (out.loss.detach(), out.predicted_tokens)
            extras.update({f"{name}_{extra}": value for extra, value in out.extras.items()})
        parts = list(outputs.values())
        if self.masks_inputs:
            masked = sum(share * weight for share, weight in
                         (out.extras["mask_share"] for out in parts if "mask_share" in out.extras))
            extras["mask_share"] = mask_share(torch.as_tensor(masked),
                                              torch.stack([torch.as_tensor(out.input_tokens) for out in parts]).sum())
        return LossOutput(
            loss=sum(self.settings[name] / weight * out.loss for name, out in outputs.items()),
            lm_nll_sum=torch.stack([out.lm_nll_sum for out in parts]).sum(),
            predicted_tokens=torch.stack([torch.as_tensor(out.predicted_tokens) for out in parts]).sum(),
            input_tokens=torch.stack([torch.as_tensor(out.input_tokens) for out in parts]).sum(),
            forward_flops=sum(out.forward_flops for out in parts),
            extras=extras,
        )

    @classmethod
    def representative(cls, config: dict[str, Any]) -> str | None:
        return config.get("answers_as")
