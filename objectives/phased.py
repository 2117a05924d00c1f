"""Objectives in sequence within one run: a curriculum such as AR for half the token budget, then MLM
(Gisserot-Boukhlef et al. 2025, "Should We Still Pretrain Encoders with Masked Language Modeling?": a causal-LM
phase before MLM beats MLM alone at a fixed budget). One optimiser and one learning-rate schedule span the run; a
two-run chain with init_from= restarts both instead (train.py)."""

from __future__ import annotations

import logging
from typing import Any

import torch

from armlm.common.errors import ArmlmError
from armlm.models.backbone import Transformer
from armlm.objectives.base import Batch, LossOutput, TrainingProgress
from armlm.objectives.composite import DOWNSTREAM_ATTRIBUTES, VALIDATION_ATTRIBUTES, Composite

log = logging.getLogger("armlm.train")


class PhasedObjective(Composite):
    """Phases as {name: {until: share, objective: ...}}: each phase trains until `until` of the token budget, the
    last until 1. A training batch belongs to the phase its first input token falls in, so the switch happens at
    the first batch boundary at or after round(until x budget) input tokens (with gradient accumulation that can be
    inside an optimiser step): a deterministic token count, the same on a resumed run, whose progress comes from
    the checkpoint. The run's summary gives both: `budget_marks`, round(until x budget), and `phase_starts`, the
    input tokens seen before each phase's first batch, as measured (training.callbacks.TokenAccounting).

    Validation, fine-tuning and scoring use the last phase: val/loss is its quantity throughout the run (how the
    first phase's model reads on the final objective), and a checkpoint is fine-tuned and scored as the last phase's
    objective's would be."""

    setting = "until"
    components_key = "phases"
    needs_progress = True  # which phase runs is a function of the tokens seen

    def __init__(self, phases: dict[str, Any]) -> None:
        super().__init__(phases)
        self.order = sorted(self.settings, key=self.settings.__getitem__)
        untils = [self.settings[name] for name in self.order]
        if len(set(untils)) != len(untils) or untils[-1] != 1.0:
            raise ArmlmError(f"objective.phases: the phases' `until` shares {dict(self.settings)} must differ and the "
                             "last must be 1.0 (the end of the budget)")
        self.needs_progress = True
        last = self.order[-1]
        self.answer_as(last, DOWNSTREAM_ATTRIBUTES + VALIDATION_ATTRIBUTES)
        self.current, self.stepping = last, False

    def switch_tokens(self, total_tokens: int) -> dict[str, int]:
        """Each phase's first input token: phase k starts where phase k - 1's `until` share of the budget ends."""
        starts, previous = {}, 0.0
        for name in self.order:
            starts[name] = round(previous * total_tokens)
            previous = self.settings[name]
        return starts

    def budget_marks(self, total_tokens: int) -> dict[str, int]:
        return self.switch_tokens(total_tokens)

    @property
    def phase(self) -> str | None:
        return self.current if self.stepping else None

    def phase_at(self, progress: TrainingProgress) -> str:
        starts = self.switch_tokens(progress.total_tokens)
        return [name for name in self.order if starts[name] <= progress.tokens_seen][-1]

    def set_progress(self, progress: TrainingProgress | None) -> None:
        super().set_progress(progress)
        current = self.order[-1] if progress is None else self.phase_at(progress)
        if progress is not None and current != self.current and self.stepping:
            log.info("phase %r (%s) from input token %d of %d", current, type(self.parts[current]).__name__,
                     progress.tokens_seen, progress.total_tokens)
        self.current, self.stepping = current, progress is not None

    def loss(self, batch: Batch, model: Transformer, generator: torch.Generator | None = None) -> LossOutput:
        out = self.parts[self.current].loss(batch, model, generator)
        if self.stepping:  # validation runs the last phase, whose extras are the ones validation logs
            index = float(self.order.index(self.current))
            out.extras = {**out.extras, "phase": (torch.tensor(index, device=batch["input_ids"].device), 1)}
        return out

    @classmethod
    def representative(cls, config: dict[str, Any]) -> str:
        phases = config[cls.components_key]
        return max(phases, key=lambda name: float(phases[name]["until"]))
