"""The LM head's summed cross-entropy, computed a block of rows at a time.

The plain `F.cross_entropy(F.linear(h, W, b), y)` materialises an N x V logit matrix and walks it about six
times (matmul out, log-softmax, its output, the zero-filled NLL gradient, the softmax gradient, the matmul in).
At AR's N = 4,096, V = 8,192 that is 134 MB per walk, and those memory passes cost a large share of the head's
matmul time on a CPU (docs/results/performance.md, "Figures moved out of code comments"). Here each block of rows computes its
logits, its NLL and, when a gradient is wanted, its gradients straight away (softmax minus one-hot, times the
weights), so the logits never exist whole and stay in cache. Same FLOPs as the plain form; the backward pass only
scales the stored gradients by the upstream one.
"""

from __future__ import annotations

import torch
from torch import Tensor

from armlm.common.errors import ArmlmError
from armlm.common.vocabulary import IGNORE_INDEX
from armlm.models.rows import every_row

# Logits per block of rows. On a CPU the block should stay in the last-level cache (16 MB of fp32); on a GPU
# blocking only bounds memory, and bigger blocks keep its matmuls large (512 MB: 2 blocks at BERT-base, 16 x 512).
CPU_LOGITS_PER_BLOCK = 1 << 22
ACCELERATOR_LOGITS_PER_BLOCK = 1 << 27
# Below this a target's probability is too close to fp32's underflow for -log(p) to be exact (e^-69).
TINY_PROBABILITY = 1e-30


def matmul_dtype(device_type: str, weights_dtype: torch.dtype) -> torch.dtype:
    """The dtype matmuls run in on this device: autocast's where it is on, else the weights' own."""
    return torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else weights_dtype


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden: Tensor, weight: Tensor, bias: Tensor, targets: Tensor, scored: Tensor | None, want_grad: bool,
                row_weights: Tensor | None, excluded: int | None) -> Tensor:
        device = hidden.device.type
        budget = CPU_LOGITS_PER_BLOCK if device == "cpu" else ACCELERATOR_LOGITS_PER_BLOCK
        rows = max(1, budget // weight.shape[0])  # 512 rows at V = 8,192 on a CPU
        # The matmuls run in autocast's dtype (bf16) where it is on; the operands are cast once here, not once per
        # block and matmul as autocast would (weight.t() is a view, which autocast's cast cache does not keep).
        dtype = matmul_dtype(device, hidden.dtype)
        hidden_c, weight_c, bias_c = hidden.to(dtype), weight.to(dtype), bias.to(dtype)
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        plain = torch.zeros((), dtype=torch.float32, device=hidden.device)  # unweighted, for logging
        grad_hidden = torch.empty_like(hidden) if want_grad else None
        grad_weight = torch.zeros_like(weight, dtype=torch.float32) if want_grad else None
        grad_bias = torch.zeros_like(bias, dtype=torch.float32) if want_grad else None
        with torch.autocast(device, enabled=False):
            for start in range(0, hidden.shape[0], rows):
                h, y = hidden_c[start:start + rows], targets[start:start + rows]
                logits = torch.addmm(bias_c, h, weight_c.t())
                if excluded is not None:
                    logits[:, excluded] = float("-inf")  # out of the support: zero probability, zero gradient
                # The softmax in fp32, whatever the logits' dtype. Its probabilities are the gradient (minus the
                # one-hot), and the target's gives the NLL: one pass fewer than log_softmax, then exp.
                probs = torch.softmax(logits, dim=-1, dtype=torch.float32)
                nll = _nll_of_target(probs, logits, y)
                w = None if row_weights is None else row_weights[start:start + rows].float()
                if scored is not None:  # a row not scored (models.rows) adds nothing and gets no gradient
                    keep = scored[start:start + rows]
                    nll = torch.where(keep, nll, 0.0)
                    w = keep.float() if w is None else w * keep
                block_sum = nll.sum()
                plain += block_sum
                total += block_sum if w is None else (w * nll).sum()
                if not want_grad:
                    continue
                grad_logits = probs
                grad_logits[torch.arange(y.shape[0], device=y.device), y] -= 1.0
                if w is not None:
                    grad_logits *= w[:, None]
                grad_bias += grad_logits.sum(0)
                grad_logits = grad_logits.to(dtype)
                grad_hidden[start:start + rows] = grad_logits @ weight_c
                grad_weight += grad_logits.t() @ h
        if want_grad:
            ctx.save_for_backward(grad_hidden, grad_weight.to(weight.dtype), grad_bias.to(bias.dtype))
        ctx.mark_non_differentiable(plain)
        return total, plain

    @staticmethod
    def backward(ctx, grad_total: Tensor, grad_plain: Tensor | None) -> tuple[Tensor | None, ...]:
        grad_hidden, grad_weight, grad_bias = ctx.saved_tensors
        need = ctx.needs_input_grad
        return (grad_hidden * grad_total if need[0] else None, grad_weight * grad_total if need[1] else None,
                grad_bias * grad_total if need[2] else None, None, None, None, None, None)


def _nll_of_target(probs: Tensor, logits: Tensor, targets: Tensor) -> Tensor:
    """-log p(target) per row, in fp32. From the softmax's probability, except where that underflows (an NLL
    beyond about 69 nats): there the row's largest logit anchors it (`_anchored_nll`).

    Where reading a device flag is free (eager, on a CPU) only the rare underflowing rows take the anchor. Anywhere
    else (a GPU, where reading the flag waits for the device; a compiled step, where it would break the graph) every
    row computes both and one is chosen: a pass over the logits more (bench/lm_loss_paths.py), no branch."""
    if probs.device.type == "cpu" and not torch.compiler.is_compiling():
        return nll_branching(probs, logits, targets)
    return nll_branch_free(probs, logits, targets)


def nll_branching(probs: Tensor, logits: Tensor, targets: Tensor) -> Tensor:
    p_target = probs.gather(1, targets[:, None]).squeeze(1)
    nll = -torch.log(p_target)
    tiny = p_target < TINY_PROBABILITY
    if bool(tiny.any()):
        nll[tiny] = _anchored_nll(probs[tiny], logits[tiny], targets[tiny])
    return nll


def nll_branch_free(probs: Tensor, logits: Tensor, targets: Tensor) -> Tensor:
    p_target = probs.gather(1, targets[:, None]).squeeze(1)
    return torch.where(p_target < TINY_PROBABILITY, _anchored_nll(probs, logits, targets), -torch.log(p_target))


def _anchored_nll(probs: Tensor, logits: Tensor, targets: Tensor) -> Tensor:
    """-log p(target) = (max logit - logit(target)) - log(max p): the largest probability is the largest logit's and
    is at least 1/V, so it never underflows and this is exact however small p(target) is. Two max reductions
    without indices (a max with its index costs about four times one without, on a CPU)."""
    gap = logits.amax(dim=-1).float() - logits.gather(1, targets[:, None]).squeeze(1).float()
    return gap - torch.log(probs.amax(dim=-1))


def linear_cross_entropy(hidden: Tensor, weight: Tensor, bias: Tensor, targets: Tensor, *,
                         excluded: int | None = None) -> Tensor:
    """Summed NLL (fp32) of `targets` (N,) under softmax(hidden @ weight.T + bias) for hidden (N, d).

    Eagerly every target must be a real class: callers select the rows that carry a loss first (which also spares the
    head's work on padding). In a compiled step (models.rows.every_row) a target of IGNORE_INDEX adds nothing and gets
    no gradient: the rows kept there without being chosen. Equal to `F.cross_entropy(F.linear(hidden, weight, bias), targets, reduction="sum")`
    within float rounding, gradients included. `excluded` is a class removed from the support (its logit -inf
    before the softmax: masked diffusion never predicts [MASK]); no target may be it.
    """
    return weighted_linear_cross_entropy(hidden, weight, bias, targets, None, excluded=excluded)[0]


def weighted_linear_cross_entropy(hidden: Tensor, weight: Tensor, bias: Tensor, targets: Tensor,
                                  row_weights: Tensor | None, *, excluded: int | None = None) -> tuple[Tensor, Tensor]:
    """(sum of row_weights x each row's NLL, with gradients; the plain summed NLL of the same rows, without):
    masked diffusion optimises the first (its 1/t weights are constants) and logs the second, from one pass."""
    if row_weights is not None and row_weights.shape != targets.shape:
        raise ArmlmError(f"row_weights has shape {tuple(row_weights.shape)}, targets {tuple(targets.shape)}")
    if hidden.shape[0] == 0:
        zero = (hidden.sum() + weight.sum() * 0 + bias.sum() * 0).float()  # zero that keeps the graph
        return zero, zero.detach()
    want_grad = torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad or bias.requires_grad)
    scored = None
    if every_row():
        scored = targets != IGNORE_INDEX
        targets = targets.masked_fill(~scored, 0)
    return _LinearCrossEntropy.apply(hidden, weight, bias, targets, scored, want_grad,
                                     None if row_weights is None else row_weights.detach(), excluded)
