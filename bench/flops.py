"""How many matmul FLOPs a training or inference step executes, counted as ../shared/specs/performance.md says
(by models.flops, the count train.py's FLOPs budget uses).

Per token, a forward pass costs 2 x (the weights of every linear layer the token passes through), plus the
vocabulary projection only at the positions where it is computed (every position for AR or a dense MLM head,
the selected ones for armlm's sparse MLM head, whose last MLP also runs only there), plus attention's QK^T and
AV: 2 x 2 x T x d per layer (half for causal attention, whose kernels skip the masked blocks). Training is
3 x forward. The classic 6 x N x T figure is printed beside it, with N the non-embedding parameters, but not
used for targets: it leaves out the vocabulary projection, a third of the work at d = 256, V = 8192.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from armlm.models.flops import block_linear_weights, forward_flops


@dataclass(frozen=True)
class Shape:
    d_model: int = 256
    n_layers: int = 4
    n_heads: int = 4
    d_ff: int = 1024
    vocab_size: int = 8192
    batch_size: int = 32
    seq_len: int = 128

    @property
    def tokens(self) -> int:
        return self.batch_size * self.seq_len

    @property
    def non_embedding_parameters(self) -> int:
        return self.n_layers * block_linear_weights(self.d_model, self.d_ff)


def forward_flops_per_token(shape: Shape, *, causal: bool, vocab_share: float, last_mlp_share: float = 1.0,
                            mlm_transform: bool = False) -> float:
    """Matmul FLOPs of one token's forward pass (models.flops, which train.py's FLOPs budget counts with).
    `vocab_share` is the share of positions whose vocabulary logits are computed, `last_mlp_share` the share
    that goes through the last block's MLP (armlm's MLM runs it only where it scores); `mlm_transform` adds
    BERT's dense d x d layer in front of the decoder (Hugging Face's BERT, which armlm's head does not have)."""
    per_sequence = forward_flops(d_model=shape.d_model, n_layers=shape.n_layers, d_ff=shape.d_ff,
                                 vocab_size=shape.vocab_size, sequences=1, length=shape.seq_len,
                                 output_rows=last_mlp_share * shape.seq_len, vocab_rows=vocab_share * shape.seq_len,
                                 attention_share=0.5 if causal else 1.0)
    transform = 2.0 * vocab_share * shape.d_model**2 if mlm_transform else 0.0
    return per_sequence / shape.seq_len + transform


def classic_flops_per_token(shape: Shape) -> float:
    """6 x N x T with N the non-embedding parameters (the figure papers quote), training."""
    return 6.0 * shape.non_embedding_parameters


def matmul_peak(device: torch.device, dtype: torch.dtype, size: int = 2048, seconds: float = 1.0) -> float:
    """FLOP/s of a large square matmul: the machine's practical peak, measured in the calling process."""
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    for _ in range(2):  # warm-up: thread pool, allocator, clocks
        a @ b
    synchronize(device)
    runs, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds or runs < 3:
        a @ b
        runs += 1
    synchronize(device)
    return 2.0 * size**3 * runs / (time.perf_counter() - started)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
