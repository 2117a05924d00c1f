"""Masked next-token prediction (MNTP), GPT-BERT's masked half (Charpentier & Samuel 2024; ltgoslo/gpt-bert,
pretraining/dataset.py `SpanMaskingStrategy` and `MaskedDataset.apply_mask`): BERT's corruption in spans, the
masked token at position i predicted from the state at i - 1 (where a causal LM predicts its next token), so one
head serves the masked and the causal rows of objectives.hybrid. A component of that mixture (its config lives in
configs/objective/component/), not an objective of its own: trained alone it would be an MLM read one place left."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from armlm.common.errors import ArmlmError
from armlm.models.backbone import Transformer
from armlm.models.rows import flops_rows, take
from armlm.objectives.base import IGNORE_INDEX, Batch, LossOutput, TrainingProgress, mean_or_zero, summed_token_nll
from armlm.objectives.mlm import MaskedLM, mask_share

CORRUPTION_UNITS = ("span", "token")


def span_starts(shape: tuple[int, int], lengths: Tensor, generator: torch.Generator | None,
                device: torch.device) -> Tensor:
    """(B, T): per position, the first position of its span, the rows cut into consecutive spans whose lengths are
    drawn uniformly from `lengths` (the reference's `torch.randint(1, max_span_length + 1)` when lengths = 1..3)."""
    rows, length = shape
    draws = lengths.to(device)[torch.randint(len(lengths), shape, generator=generator, device=device)]
    starts = draws.cumsum(1) - draws  # span k starts where spans 0..k-1 end; T spans always reach past the row
    inside = starts < length
    marker = torch.zeros(shape, dtype=torch.long, device=device)
    marker.scatter_add_(1, starts.clamp(max=length - 1), inside.long())
    span = marker.cumsum(1) - 1  # each position's span index
    return starts.gather(1, span)


class MaskedNextTokenLM(MaskedLM):
    """Per row: spans as `span_starts`; each span gets one random score, and the spans with the lowest scores are
    selected until floor(n x rate + u) of the row's n ordinary positions are (u uniform: the reference's stochastic
    rounding; at least one, and a span is taken whole, so a row may get up to max(span) - 1 more). `corruption`:
    "span" draws mask / random / keep once per span (the reference), "token" per position. The rate falls linearly
    from `mask_rate_start` to `mask_rate` over the token budget (the reference's 30 % -> 15 % over its steps);
    validation uses `mask_rate` (the reference's ValidationDataset: 15 %). mask_rate_start=null keeps it fixed."""

    pretraining_attention = "bidirectional"
    finetune_attention = "bidirectional"
    scoring = "conditionals"
    masked_conditionals = True
    masked_prediction_offset = 1
    reference = "Charpentier and Samuel 2024 (GPT-BERT), masked next-token prediction"
    babylm_backend = "mntp"
    val_loss_kind = "masked_next_token"
    extra_metrics = ("mask_share", "mask_rate")

    def __init__(self, mask_rate: float = 0.15, mask_rate_start: float | None = None,
                 span_lengths: Sequence[int] = (1, 2, 3), corruption: str = "span", mask_prob: float = 0.8,
                 random_prob: float = 0.1, keep_prob: float = 0.1, replacement: str = "uniform") -> None:
        super().__init__(mask_rate=mask_rate, mask_prob=mask_prob, random_prob=random_prob, keep_prob=keep_prob,
                         replacement=replacement)
        if mask_rate_start is not None and (isinstance(mask_rate_start, bool) or not isinstance(
                mask_rate_start, (int, float)) or not 0 < mask_rate_start <= 1):
            raise ArmlmError(f"objective.mask_rate_start={mask_rate_start!r} must be in (0, 1], or null for a fixed rate")
        lengths = list(span_lengths) if isinstance(span_lengths, Sequence) and not isinstance(span_lengths, str) else []
        if not lengths or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in lengths):
            raise ArmlmError(f"objective.span_lengths={span_lengths!r} must list positive integers, drawn uniformly "
                             "(GPT-BERT: [1, 2, 3]; [1] masks single tokens)")
        if corruption not in CORRUPTION_UNITS:
            raise ArmlmError(f"objective.corruption={corruption!r}; choose one of {CORRUPTION_UNITS}")
        if mask_rate <= 0:
            raise ArmlmError("objective.mask_rate must be above 0: every row predicts at least its masked spans")
        self.mask_rate_start = None if mask_rate_start is None else float(mask_rate_start)
        self.register_buffer("span_lengths", torch.tensor(lengths), persistent=False)
        self.corruption = corruption
        self.needs_progress = self.mask_rate_start is not None
        # The rate now, a tensor changed in place: a compiled step reads it as an input, so the schedule never
        # recompiles it (a Python float would be a constant of the graph).
        self.register_buffer("rate", torch.tensor(float(mask_rate)), persistent=False)

    def set_progress(self, progress: TrainingProgress | None) -> None:
        if progress is None or self.mask_rate_start is None:
            self.rate.fill_(float(self.mask_rate))
        else:
            self.rate.fill_(self.mask_rate_start + (self.mask_rate - self.mask_rate_start) * progress.fraction)

    def select(self, input_ids: Tensor, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor | None]:
        device = input_ids.device
        starts = span_starts(input_ids.shape, self.span_lengths, generator, device)
        scores = torch.rand(input_ids.shape, generator=generator, device=device).gather(1, starts)
        ordinary = ~self.is_special[input_ids]
        scores = scores.masked_fill(~ordinary, float("inf"))
        n = ordinary.sum(1)
        jitter = torch.rand(n.shape, generator=generator, device=device)
        count = torch.floor(n * self.rate + jitter).long().clamp(min=1).minimum(n)
        threshold = scores.sort(dim=1).values.gather(1, (count - 1).clamp(min=0)[:, None])
        selected = (scores <= threshold) & ordinary & (n > 0)[:, None]
        return selected, starts if self.corruption == "span" else None

    def loss(self, batch: Batch, model: Transformer, generator: torch.Generator | None = None) -> LossOutput:
        corrupted, labels = self.corrupt(batch["input_ids"], generator)
        # Shifted: the state at i - 1 predicts the token at a selected position i ([CLS] at 0 is never selected).
        # (B, T): the target each position's state predicts, IGNORE_INDEX at the last and wherever none is
        targets = torch.cat([labels[:, 1:], torch.full_like(labels[:, :1], IGNORE_INDEX)], dim=1)
        predicting = targets != IGNORE_INDEX
        attention = self.attention(batch)
        states = model(corrupted, attention=attention, attention_mask=batch.get("attention_mask"),
                       token_type_ids=batch.get("token_type_ids"), output_mask=predicting)
        nll_sum, n_predicted = summed_token_nll(model, states, take(targets, predicting, IGNORE_INDEX))
        inputs = self.input_token_count(batch)
        rows = flops_rows(predicting)
        return LossOutput(
            loss=mean_or_zero(nll_sum, n_predicted),
            lm_nll_sum=nll_sum.detach(),
            predicted_tokens=n_predicted,
            input_tokens=inputs,
            forward_flops=model.forward_flops(corrupted, attention, attention_mask=batch.get("attention_mask"),
                                              output_rows=rows, vocab_rows=rows),
            extras={"mask_share": mask_share((corrupted == self.mask_id).sum(), inputs),
                    "mask_rate": (self.rate.clone(), 1)},
        )
