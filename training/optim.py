"""AdamW with linear warmup and linear decay (from warmup's end, or over the last part of the run only), shared by
pretraining and fine-tuning."""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from lightning.pytorch.plugins.precision import MixedPrecision
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

FUSED_ADAMW_DEVICES = ("cpu", "cuda")


def decay_start(total_steps: int, warmup_steps: int, decay_fraction: float | None) -> int:
    """The first step of the decay: right after warmup (decay_fraction null), or the last `decay_fraction` of the
    steps, never inside warmup (warmup-stable-decay, training.branches)."""
    if decay_fraction is None:
        return warmup_steps
    return max(warmup_steps, total_steps - round(float(decay_fraction) * total_steps))


def warmup_then_linear_decay(step: int, warmup_steps: int, total_steps: int, min_lr_ratio: float,
                             decay_start: int | None = None) -> float:
    """The learning rate's factor at `step`: linear warmup, then 1 until `decay_start` (default: warmup's end),
    then linear down to `min_lr_ratio` at `total_steps`."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    start = warmup_steps if decay_start is None else decay_start
    progress = min(1.0, max(0.0, (step - start) / max(1, total_steps - start)))
    return 1.0 - (1.0 - min_lr_ratio) * progress


def adamw_with_schedule(module: nn.Module, *, lr: float, weight_decay: float, betas: tuple[float, float],
                        eps: float, warmup_steps: int, total_steps: int, min_lr_ratio: float,
                        fused: bool | None = None, decay_start: int | None = None,
                        own_rates: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Lightning's optimiser dict. Only matrices decay; biases, norms and the LM bias are left alone (as in
    BERT and GPT-2). Frozen parameters are left out, so a feature-based run optimises its head only.
    `own_rates`: parameter groups ({"params": [...], "lr": ...}) with a rate of their own and no weight decay
    (ELMo's scalar mix), on the same schedule.
    `fused` (default: wherever torch has the kernel, CPU and CUDA) updates every parameter in one kernel, several
    times faster per step than foreach on a CPU (bench/README.md, "What makes armlm faster")."""
    own = [{**group, "params": list(group["params"]), "weight_decay": 0.0} for group in own_rates or []]
    taken = {id(p) for group in own for p in group["params"]}
    params = [p for p in module.parameters() if p.requires_grad and id(p) not in taken]
    if fused is None:
        fused = all(p.device.type in FUSED_ADAMW_DEVICES for p in params)
    groups = [
        {"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
        *own,
    ]
    optimizer = torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, fused=fused)
    schedule = LambdaLR(optimizer, lambda step: warmup_then_linear_decay(step, warmup_steps, total_steps, min_lr_ratio,
                                                                         decay_start))
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


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
