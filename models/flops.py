"""Matmul FLOPs a backbone call executes, counted as ../shared/specs/performance.md says.

A forward pass costs 2 x (the weights of every linear layer a row passes through): every position goes through
each block's attention projections and MLP, except that the last block's MLP runs only on the rows the caller
asked states for (`output_rows`: an MLM's selected positions); the vocabulary projection costs 2 x d x V per
row it is computed at (`vocab_rows`); attention's QK^T and AV cost 2 x 2 x T x d per query per layer, half when
SDPA gets `is_causal` without a mask (its kernels skip the blocks above the diagonal; a dense mask computes
them all). A training step is 3 x its forward FLOPs. Embedding lookups, norms and softmaxes are not matmuls and
are left out. tests/test_flops.py holds the count against torch.utils.flop_counter on the real model.

The FLOPs budget (train.py `max_flops=`, logged as train/flops_seen) and bench/flops.py use these functions, so
a study at equal compute and the utilisation figures count the same way.
"""

from __future__ import annotations

from torch import nn

from armlm.common.errors import ArmlmError

TRAINING_PASSES = 3  # forward + backward (two matmuls per forward one: the input and the weight gradients)


def block_linear_weights(d_model: int, d_ff: int) -> int:
    """Weights of one block's linear layers: Q, K, V and output projections (4 d^2) and the MLP's two (2 d ff)."""
    return 4 * d_model * d_model + 2 * d_model * d_ff


def forward_flops(*, d_model: int, n_layers: int, d_ff: int, vocab_size: int, sequences: int, length: int,
                  output_rows: int, vocab_rows: int, attention_share: float) -> float:
    """Matmul FLOPs of one backbone forward over `sequences` x `length` positions, with the last block's MLP on
    `output_rows` rows and the vocabulary projection on `vocab_rows` rows; `attention_share` is the share of the
    T x T scores computed (models.attention.attention_share)."""
    positions = sequences * length
    if not 0 <= output_rows <= positions:
        raise ArmlmError(f"output_rows={output_rows} must be in [0, {positions}] (the positions of the batch)")
    skipped_mlp_rows = positions - output_rows
    linear = n_layers * positions * block_linear_weights(d_model, d_ff) - skipped_mlp_rows * 2 * d_model * d_ff
    head = vocab_rows * d_model * vocab_size
    attention = n_layers * positions * 2 * length * d_model * attention_share
    return 2.0 * (linear + head + attention)


def linear_flops(module: nn.Module, rows: int) -> float:
    """Forward matmul FLOPs of `rows` rows through every nn.Linear in `module` (a small head run once per row,
    e.g. MLM+NSP's pooler and classifier on [CLS])."""
    weights = sum(m.in_features * m.out_features for m in module.modules() if isinstance(m, nn.Linear))
    return 2.0 * rows * weights
