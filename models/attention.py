"""How each query position may attend: one value handed to the backbone per call, turned into SDPA's
arguments in one place.

    CAUSAL                    every position sees itself and the positions before it
    BIDIRECTIONAL             every position sees every (non-padding) position
    Attention.prefix(n)       row i: bidirectional inside its first n[i] positions, causal after (prefix LM)
    Attention.explicit(m)     m (B, T, T) bool, True where query t may attend to key s (any other pattern)

Any of them `.within(documents)` ((B, T) document ids, data.cross_document_attention=false): a position also attends
only to positions of its own document, and to the block's first position, its [CLS] (every packed block starts with
one), as if each document of a packed block were alone behind a [CLS]. The [CLS] then attends to itself alone, so
nothing passes through it from one document to another. Without it, every document but a block's first would
pretrain with no [CLS] to attend to (which a model trained across documents leans on: docs/findings.md, packing),
while every fine-tuning input starts with one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import Tensor

from armlm.common.errors import ArmlmError

KINDS = ("causal", "bidirectional", "prefix", "mask")
STATIC_KINDS = ("causal", "bidirectional")  # the ones that need no per-input tensor (fine-tuning, diagnostics)


@dataclass(frozen=True, eq=False)
class Attention:
    kind: str
    prefix_lengths: Tensor | None = None  # (B,) for kind "prefix"
    allowed: Tensor | None = None  # (B, T, T) bool for kind "mask"
    documents: Tensor | None = None  # (B, T) integer document ids: no attention across documents

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ArmlmError(f"attention kind {self.kind!r}; choose one of {KINDS}")
        if (self.kind == "prefix") != (self.prefix_lengths is not None):
            raise ArmlmError("prefix attention needs prefix_lengths (B,), and only prefix attention takes them")
        if (self.kind == "mask") != (self.allowed is not None):
            raise ArmlmError("an explicit attention mask needs `allowed` (B, T, T), and only it takes one")
        if self.allowed is not None and (self.allowed.dtype != torch.bool or self.allowed.dim() != 3):
            raise ArmlmError(f"explicit attention takes a (B, T, T) bool mask, got {self.allowed.dtype} "
                             f"{tuple(self.allowed.shape)}")
        if self.documents is not None and (self.documents.dim() != 2 or self.documents.dtype.is_floating_point):
            raise ArmlmError(f"documents takes one integer document id per position, (B, T), got "
                             f"{self.documents.dtype} {tuple(self.documents.shape)}")
        lengths = self.prefix_lengths
        if lengths is not None and (lengths.dim() != 1 or lengths.dtype.is_floating_point or (
                not torch.compiler.is_compiling() and bool((lengths < 0).any()))):
            raise ArmlmError(f"prefix attention takes one non-negative integer length per row, (B,), got "
                             f"{lengths.dtype} {tuple(lengths.shape)}")

    def within(self, documents: Tensor | None) -> Attention:
        """The same pattern, restricted to each position's own document (None: unrestricted, this pattern)."""
        return self if documents is None else replace(self, documents=documents)

    def rows(self) -> int | None:
        """The batch size the pattern is for (None: any)."""
        if self.documents is not None:
            return self.documents.shape[0]
        if self.kind == "prefix":
            return self.prefix_lengths.shape[0]
        return self.allowed.shape[0] if self.kind == "mask" else None

    @staticmethod
    def named(kind: str) -> Attention:
        """CAUSAL or BIDIRECTIONAL from their names, as plain-dict settings and configs store them."""
        if kind not in STATIC_KINDS:
            raise ArmlmError(f"attention {kind!r} cannot be named in a setting; choose one of {STATIC_KINDS}")
        return CAUSAL if kind == "causal" else BIDIRECTIONAL

    @staticmethod
    def prefix(lengths: Tensor | list[int]) -> Attention:
        return Attention("prefix", prefix_lengths=torch.as_tensor(lengths))

    @staticmethod
    def explicit(allowed: Tensor) -> Attention:
        return Attention("mask", allowed=allowed)


CAUSAL = Attention("causal")
BIDIRECTIONAL = Attention("bidirectional")


# The longest sequence the explicit kernel takes: it keeps each layer's B x H x T x T probabilities for the
# backward pass (at T = 512, 16 x 12 heads: 100 MB of bf16 per layer), where SDPA's flash kernel keeps none.
EXPLICIT_KERNEL_MAX_LEN = 512


def uses_explicit_kernel(device_type: str, dtype: torch.dtype, length: int, dropout: float) -> bool:
    """Whether `attend` computes attention as two matmuls and a softmax instead of calling SDPA: on a CPU in
    bf16, where SDPA's flash kernel is the slow one: the explicit kernel's forward + backward is faster at every
    size measured up to 512 tokens (docs/results/performance.md, "bf16 on the CPU", item 1). In fp32 SDPA is as fast or
    faster, so fp32 keeps it.
    With dropout SDPA keeps the job, so its random stream, and what a seed gives, do not change."""
    return device_type == "cpu" and dtype == torch.bfloat16 and dropout == 0.0 and length <= EXPLICIT_KERNEL_MAX_LEN


def attend(q: Tensor, k: Tensor, v: Tensor, *, mask: Tensor | None, is_causal: bool, dropout: float) -> Tensor:
    """softmax(q kᵀ / sqrt(hd)) v over (B, H, T, hd) inputs, with `sdpa_arguments`' mask or is_causal."""
    if uses_explicit_kernel(q.device.type, q.dtype, q.shape[-2], dropout):
        return explicit_attention(q, k, v, mask=mask, is_causal=is_causal)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal, dropout_p=dropout)


def explicit_attention(q: Tensor, k: Tensor, v: Tensor, *, mask: Tensor | None, is_causal: bool) -> Tensor:
    """Attention as HF's eager path computes it: scores and probabilities in the inputs' dtype (the softmax
    reduces in fp32 inside the kernel), no autocast casts in between. A query with no key to attend to (a
    sequence that is all padding) gets 0, as SDPA gives it, not the NaN of an all -inf softmax."""
    b, h, t, hd = q.shape
    scale = hd ** -0.5
    with torch.autocast(q.device.type, enabled=False):
        if is_causal:
            # The matmul adds the -inf above the diagonal itself (baddbmm's input), and scales: one pass over the
            # scores fewer than masked_fill, and faster (docs/results/performance.md, "bf16 on the CPU", item 1).
            above = torch.full((t, t), float("-inf"), dtype=q.dtype, device=q.device).triu(1)
            scores = torch.baddbmm(above, q.reshape(b * h, t, hd), k.reshape(b * h, t, hd).transpose(1, 2),
                                   alpha=scale).view(b, h, t, t)
        else:
            scores = (q * scale) @ k.transpose(-1, -2)
        if mask is not None:
            scores.masked_fill_(~mask, float("-inf"))  # in place: the matmul's backward keeps q and k, not this
        probs = torch.softmax(scores, dim=-1)
        if mask is not None:
            nothing = ~mask.any(dim=-1, keepdim=True)  # (B, 1, T, 1) or (B, 1, 1, 1)
            # Eager skips the fill when no row is empty (reading the flag is free on a CPU); a compiled step
            # always fills, since reading it would break the graph.
            if torch.compiler.is_compiling() or bool(nothing.any()):
                probs = probs.masked_fill(nothing, 0.0)
        return probs @ v


def attention_share(attention: Attention, padding: Tensor | None, *, device_type: str, dtype: torch.dtype,
                    length: int, dropout: float) -> float:
    """The share of the T x T scores the kernel `attend` picks computes, for the FLOPs count (models.flops): 0.5
    only where SDPA skips the blocks above the diagonal, which it does for `is_causal=True` without a mask (causal
    attention without padding) but not with attention dropout on a CPU, which sends it to its math kernel
    (../shared/specs/performance.md). The explicit kernel (`uses_explicit_kernel`: CPU, bf16, no dropout, at most
    EXPLICIT_KERNEL_MAX_LEN tokens) computes every score. 1 otherwise."""
    if attention.kind != "causal" or padding is not None or attention.documents is not None:
        return 1.0
    if uses_explicit_kernel(device_type, dtype, length, dropout) or (device_type == "cpu" and dropout > 0):
        return 1.0
    return 0.5


def sdpa_arguments(attention: Attention, padding: Tensor | None, batch: int, length: int,
                   device: torch.device) -> tuple[Tensor | None, bool]:
    """(attn_mask, is_causal) for F.scaled_dot_product_attention. Causal or bidirectional attention without
    padding needs no dense mask, so SDPA keeps its fastest kernels; otherwise one boolean mask (True = may
    attend; (B, 1, T, T), or (B, 1, 1, T) for bidirectional attention over padding) folds in everything, and
    is_causal is never passed with it. A query left with nothing to attend to (a padding position under
    left padding, or an explicit mask's empty row) attends to itself, so no row becomes NaN.

    `padding`: (B, T), 1 for real tokens and 0 for padding (keys at padding are never attended)."""
    if attention.kind in STATIC_KINDS and padding is None and attention.documents is None:
        return None, attention.kind == "causal"
    if attention.rows() not in (None, batch):
        raise ArmlmError(f"{attention.kind} attention is for {attention.rows()} rows, the batch has {batch}")
    positions = torch.arange(length, device=device)
    if attention.kind == "causal":
        allowed = (positions[None, :] <= positions[:, None])[None]  # (1, T, T)
    elif attention.kind == "prefix":
        lengths = attention.prefix_lengths.to(device)[:, None, None]  # (B, 1, 1)
        allowed = (positions[None, :] <= positions[:, None])[None] | (positions[None, None, :] < lengths)
    elif attention.kind == "mask":
        if attention.allowed.shape[-2:] != (length, length):
            raise ArmlmError(f"explicit attention mask {tuple(attention.allowed.shape)} does not fit "
                             f"{length}-token inputs")
        allowed = attention.allowed.to(device)
    else:
        allowed = torch.ones(1, 1, 1, dtype=torch.bool, device=device)
    if attention.documents is not None:
        documents = attention.documents.to(device)
        if documents.shape[-1] != length:
            raise ArmlmError(f"document ids {tuple(documents.shape)} do not fit {length}-token inputs")
        start = positions == 0  # the block's [CLS]: every document's, and itself no document's
        allowed = allowed & (((documents[:, :, None] == documents[:, None, :]) & ~start[None, :, None])
                             | start[None, None, :])  # (B, T, T)
    if padding is not None:
        allowed = allowed & padding.bool()[:, None, :]  # keys at padding: (B, 1, T)
    if allowed.shape[-2] == length:  # per-query rows: none may be empty
        itself = torch.eye(length, dtype=torch.bool, device=device)
        allowed = allowed | (itself & ~allowed.any(-1, keepdim=True))
    return allowed[:, None], False  # broadcast over heads
