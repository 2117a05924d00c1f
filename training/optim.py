"""AdamW with linear warmup and linear decay (from warmup's end, or over the last part of the run only), shared by
pretraining, fine-tuning and the speed benches. Torch alone: a bench process builds the step without Lightning's
seconds of imports; what the Lightning modules do with gradients is training.gradients."""

from __future__ import annotations

from typing import Any

import torch
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
