"""A NaN/inf in training stops the run before any checkpoint holds the weights it produced: a training loss (checked
by the module's step), or a gradient norm (measured before clipping, training.gradients.ClipsUnscaledGradients). Where a
step reads nothing back to the host (a compiled step, a GPU) the first bad step is kept on the device and read with
the other scalars, at logging steps, before a checkpoint is written and when training ends."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from armlm.training.callbacks import logs_this_step
from armlm.training.gradients import grad_scaler


class NonFiniteLossError(RuntimeError):
    """Raised before the optimiser step (eagerly on a CPU) or before the next checkpoint is written (where reads are
    deferred), so no checkpoint ever holds the weights a NaN/inf produced."""


class NonFiniteGradientError(NonFiniteLossError):
    """A NaN/inf gradient norm with a finite loss. Clipping scales such gradients by max_norm / inf = 0, so without this
    stop a run takes zero updates and ends at its initial loss, exiting 0."""


# The first step at which a training loss, and a gradient norm, was NaN/inf (-1: none), in one device tensor
LOSS, GRADIENT = 0, 1
GRADIENT_CAUSES = ("an attention kernel's backward (trainer.step.sdpa_backends; on CUDA, cuDNN's: trainer=gpu leaves it "
                   "out), a learning rate too high for the warmup (optim.lr, optim.warmup_steps), or bf16 overflow "
                   "(trainer.precision=32-true tells)")


class StopsAtNonFinite:
    """A training module's mix-in, pretraining's and fine-tuning's (it reads `reads_every_step`, `global_step`,
    `current_epoch` and the optimiser hook's `measure_gradients`): the gradient norm at logging steps, under
    `grad_norm_tag`, and the stops."""

    # the first step whose training loss (LOSS) and gradient norm (GRADIENT) were NaN/inf, -1 for none
    nonfinite_at: Tensor | None = None
    grad_norm_tag = "train/grad_norm"

    def note_nonfinite(self, which: int, value: Tensor) -> None:
        """Where reads are deferred: record this step in nonfinite_at[which] if `value` is NaN/inf and none was before
        (device operations only)."""
        if self.nonfinite_at is None:
            self.nonfinite_at = torch.full((2,), -1, dtype=torch.long, device=value.device)
        first = self.nonfinite_at[which]
        self.nonfinite_at[which] = torch.where(~torch.isfinite(value) & (first < 0), self.global_step, first)

    def check_finite(self) -> None:
        """Raise NonFiniteLossError (NonFiniteGradientError) if a training loss (gradient norm) since the last check
        was NaN/inf: one read of a device tensor. Where reads are deferred it runs at logging steps, before any
        checkpoint is written and when training ends, so no checkpoint holds the weights such a step produced."""
        if self.nonfinite_at is None:
            return
        loss_step, gradient_step = self.nonfinite_at.tolist()
        self.nonfinite_at = None
        if gradient_step >= 0 and not 0 <= loss_step <= gradient_step:  # the first to go wrong (a NaN/inf gradient
            # is clipped to NaN weights, so the next step's loss follows it)
            raise NonFiniteGradientError(self.gradient_message("NaN/inf", gradient_step))
        if loss_step >= 0:
            raise NonFiniteLossError(
                f"a training loss was NaN/inf at step {loss_step} (this run reads the loss once per "
                "trainer.log_every_n_steps). Stopped before any checkpoint held its weights: the last saved checkpoint "
                "is intact. Lower optim.lr, raise optim.warmup_steps or check the data.")

    def gradient_message(self, value: str, step: int) -> str:
        return (f"the gradient norm was {value} at step {step} with a finite loss. "
                "Stopped before any checkpoint held the weights it produced: the last saved checkpoint is intact. "
                f"Likely causes: {GRADIENT_CAUSES}.")

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """The total norm before clipping (`grad_norm_tag`) at logging steps, and a stop at a NaN/inf one: at once
        where reads are free, else at the next check (check_finite). A gradient scaler (16-mixed) skips such steps
        and lowers its scale by design, so there the norm is only logged."""
        norm = self.measure_gradients(optimizer)
        if norm is None:  # a skipped batch: no gradients
            return
        if logs_this_step(self.trainer):
            self.log(self.grad_norm_tag, norm)
        if grad_scaler(self.trainer) is not None:
            return
        if not self.reads_every_step:
            self.note_nonfinite(GRADIENT, norm)
            return
        value = float(norm)
        if not math.isfinite(value):
            raise NonFiniteGradientError(self.gradient_message(str(value), self.global_step))

    def on_train_end(self) -> None:
        self.check_finite()  # the steps after the last logging step, where no checkpoint followed them
