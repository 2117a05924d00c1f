"""AdamW with linear warmup and linear decay, shared by pretraining and fine-tuning."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR


def warmup_then_linear_decay(step: int, warmup_steps: int, total_steps: int, min_lr_ratio: float) -> float:
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return 1.0 - (1.0 - min_lr_ratio) * progress


def adamw_with_schedule(module: nn.Module, *, lr: float, weight_decay: float, betas: tuple[float, float],
                        eps: float, warmup_steps: int, total_steps: int, min_lr_ratio: float,
                        fused: bool = False) -> dict[str, Any]:
    """Lightning's optimiser dict. Only matrices decay; biases, norms and the LM bias are left alone (as in
    BERT and GPT-2). Frozen parameters are left out, so a feature-based run optimises its head only."""
    params = [p for p in module.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, fused=fused)
    schedule = LambdaLR(optimizer, lambda step: warmup_then_linear_decay(step, warmup_steps, total_steps, min_lr_ratio))
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}
