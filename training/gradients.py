"""What the Lightning modules do with gradients: the total norm measured before clipping and clipped with, without
a host read (ClipsUnscaledGradients), and fused AdamW only where no GradScaler scales the gradients
(fused_adamw_allowed). The optimiser and its schedule are training.optim's."""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from lightning.pytorch.plugins.precision import MixedPrecision


def fused_adamw_allowed(module: L.LightningModule) -> bool | None:
    """The module's `fused_adamw` (None: fused where torch has it; False: never, trainer.step.fused_adamw) unless the
    gradients are
    scaled (16-mixed's GradScaler): a fused optimiser unscales inside its own step, so Lightning would hand the
    optimiser hook, and clipping, gradients still scaled (the measured norm too). bf16 autocast scales nothing, so its
    runs clip as they are (ClipsUnscaledGradients) and keep the fused kernel."""
    if grad_scaler(module.trainer) is not None:
        return False
    return getattr(module, "fused_adamw", None)


def grad_scaler(trainer: L.Trainer) -> Any:
    return getattr(trainer.precision_plugin, "scaler", None) if isinstance(trainer.precision_plugin,
                                                                           MixedPrecision) else None


class ClipsUnscaledGradients:
    """A LightningModule mix-in that measures the gradients' total norm before clipping and clips with it.

    `on_before_optimizer_step` (after backward, and after a scaler's unscaling) keeps the total 2-norm of every
    gradient as a device tensor in `grad_norm`: no host read, so a step that defers its reads stays free of syncs. A
    module may log and check it there (training.nonfinite: train/grad_norm, and a stop at a non-finite one, which
    clipping would otherwise turn into a zero update: a run that silently learns nothing).
    Where no scaler touches the gradients (fp32, bf16 autocast) the norm clips them with torch directly: Lightning's
    mixed-precision plugin refuses to clip for any optimiser that unscales by itself, fused AdamW included, even in
    bf16 where there is nothing to unscale; with a scaler, Lightning's own path runs."""

    grad_norm: torch.Tensor | None = None
    # trainer.step.fused_adamw, set by the run before fitting (None: fused where torch has the kernel; False: never)
    fused_adamw: bool | None = None

    def measure_gradients(self, optimizer: torch.optim.Optimizer) -> torch.Tensor | None:
        """The total 2-norm of the optimiser's gradients (None: no gradient, a skipped batch), kept in `grad_norm`."""
        grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        self.grad_norm = torch.nn.utils.get_total_norm(grads) if grads else None
        return self.grad_norm

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        self.measure_gradients(optimizer)

    def configure_gradient_clipping(self, optimizer: torch.optim.Optimizer, gradient_clip_val: float | None = None,
                                    gradient_clip_algorithm: str | None = None) -> None:
        if not gradient_clip_val or grad_scaler(self.trainer) is not None:
            super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)
            return
        params = [p for group in optimizer.param_groups for p in group["params"]]
        if gradient_clip_algorithm == "value":
            torch.nn.utils.clip_grad_value_(params, gradient_clip_val)
        else:  # Lightning's default, "norm", with this step's norm as measured in the hook: no host read
            norm = self.grad_norm if self.grad_norm is not None else self.measure_gradients(optimizer)
            if norm is not None:  # None: no gradient to clip
                torch.nn.utils.clip_grads_with_norm_(params, gradient_clip_val, norm)
        self.grad_norm = None  # measured again next step, never reused
