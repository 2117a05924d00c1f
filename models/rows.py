"""Positions chosen per batch (an MLM's masked positions, the tokens that carry a loss), taken as rows two ways.

Eagerly, only the chosen rows are kept: a masked LM's last MLP and its vocabulary projection run on 15 % of the
positions. In a compiled graph a row count that depends on the data would break the graph (or make every shape
symbolic), so there every row is kept, in row-major order, and the rows that were not chosen carry a fill: the
ignored target (common.vocabulary.IGNORE_INDEX), a zero weight or False. Each loss ignores those rows, so a step
computes the same values both ways, at the work of every position when compiled (`flops_rows`).

Objectives write their selections through `take` and `put` and never index with a boolean mask themselves; then one
code path is right under both.
"""

from __future__ import annotations

import torch
from torch import Tensor


def every_row() -> bool:
    """Whether chosen positions keep every row: inside a compiled graph, where shapes are fixed when it is traced."""
    return torch.compiler.is_compiling()


def take(x: Tensor, keep: Tensor, fill: float | int | bool | None = None, count: int | None = None) -> Tensor:
    """The rows of `x` at `keep`, flattened to (N, ...) in row-major order. `keep` is a bool mask over the leading
    dimensions of `x` ((B, T) for (B, T, ...) inputs). Eagerly N is the chosen count. Under `every_row` N is that
    count where the caller knows it from the shapes (`count`: a fixed number chosen per sequence), else every row,
    those not chosen holding `fill` (None: left as they are, for states whose rows a later `take` or a loss
    ignores)."""
    if not every_row():
        return x[keep]
    rows = x.reshape(-1, *x.shape[keep.dim():])
    if count is not None:  # exactly `count` chosen: their indices have a static size
        return rows.index_select(0, torch.nonzero_static(keep.reshape(-1), size=count).squeeze(-1))
    if fill is None:
        return rows
    chosen = keep.reshape(-1, *([1] * (x.dim() - keep.dim())))
    return torch.where(chosen, rows, torch.as_tensor(fill, dtype=x.dtype, device=x.device))


def put(rows: Tensor, keep: Tensor, into: Tensor) -> Tensor:
    """`into` with its `keep` positions replaced by `rows` (what `take` gives for that mask), as a copy."""
    if not every_row():
        return into.masked_scatter(keep, rows)
    return torch.where(keep, rows.reshape(into.shape), into)


def flops_rows(keep: Tensor, count: int | None = None) -> int:
    """How many rows the work of a `take(..., keep, count=count)` runs on, for the FLOPs count: eagerly the chosen
    ones (one read of their count); compiled, `count` where it is given, else every row, which is the work done
    there."""
    if not every_row():
        return int(keep.sum())
    return keep.numel() if count is None else count
