"""Rotary position embedding (Su et al. 2021), the backbone's `positions: rope`."""

from __future__ import annotations

import torch
from torch import Tensor, nn


class Rotary(nn.Module):
    """Rotary position embedding (Su et al. 2021) in the rotate-half form."""

    def __init__(self, head_dim: int, max_len: int, base: float = 10000.0) -> None:
        super().__init__()
        inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        angles = torch.outer(torch.arange(max_len, dtype=torch.float32), inv_freq)
        angles = torch.cat([angles, angles], dim=-1)
        # Derived from the config, so not worth storing in checkpoints.
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, x: Tensor, position_ids: Tensor | None = None) -> Tensor:  # x: (B, H, T, hd)
        """`position_ids` (B, T): each row's position (default 0..T-1); (B, 1, T, hd) phases broadcast over heads."""
        if position_ids is None:
            cos, sin = self.cos[:x.shape[-2]], self.sin[:x.shape[-2]]
        else:
            cos, sin = self.cos[position_ids][:, None], self.sin[position_ids][:, None]
        x1, x2 = x.chunk(2, dim=-1)
        rotated = torch.cat([-x2, x1], dim=-1)
        return x * cos.to(x.dtype) + rotated * sin.to(x.dtype)
