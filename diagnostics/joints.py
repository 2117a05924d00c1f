"""Pairwise joints built from an MLM's conditionals, and the metrics that compare them.

Notation follows `specs/pairwise-joints.md` (Torroba Hennigen & Kim, ACL 2023). For a pair of positions
(i, j) every table is indexed [a, b]: a is a candidate token at i, b one at j, and a leading dimension runs
over pairs, so one call handles a whole batch. Everything is in natural-log space and float64, because
the constructions divide and renormalise probabilities that can be as small as 1e-30.

- log_qi[n, a, b] = log q_{i|j}(a | b): normalised over a (dim -2)
- log_qj[n, a, b] = log q_{j|i}(b | a): normalised over b (dim -1)
- log_mi[n, a], log_mj[n, b]: the two-masked conditionals q_{i|-S}, q_{j|-S}
- a joint log_p[n, a, b] is normalised over the whole K x K grid
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor


def normalise_joint(log_scores: Tensor) -> Tensor:
    """Log-softmax over the last two dimensions together."""
    flat = log_scores.flatten(-2)
    return (flat - flat.logsumexp(-1, keepdim=True)).view_as(log_scores)


def independent_joint(log_mi: Tensor, log_mj: Tensor) -> Tensor:
    """MLM's own factorisation: mask both, multiply the two conditionals."""
    return normalise_joint(log_mi[..., :, None] + log_mj[..., None, :])


def mrf_joint(log_qi: Tensor, log_qj: Tensor) -> Tensor:
    """Product of the unary conditionals (log-softmaxed), normalised over the grid."""
    return normalise_joint(log_qi + log_qj)


def mrf_logit_joint(logit_i: Tensor, logit_j: Tensor) -> Tensor:
    """The MRF variant that adds raw pre-softmax logits (each row's softmax normaliser is dropped)."""
    return normalise_joint(logit_i + logit_j)


def hcb_joint(log_qi: Tensor, log_qj: Tensor, pivot: Tensor) -> Tensor:
    """Hammersley-Clifford-Besag: p(a, b) ∝ q_{i|j}(a|b) / q_{i|j}(â|b) · q_{j|i}(b|â) for a pivot â (one
    index per pair into the i candidates). Exact when the conditionals are compatible."""
    index = pivot.view(-1, 1, 1).expand(-1, 1, log_qi.shape[-1])
    at_pivot_i = log_qi.gather(-2, index)  # (N, 1, K): log q_{i|j}(â | b)
    at_pivot_j = log_qj.gather(-2, index)  # (N, 1, K): log q_{j|i}(b | â)
    return normalise_joint(log_qi - at_pivot_i + at_pivot_j)


@dataclass
class AGResult:
    log_p: Tensor
    iterations: Tensor  # (N,) iterations each pair needed to converge
    converged: Tensor  # (N,) bool


def ag_joint(log_qi: Tensor, log_qj: Tensor, tol: float = 1e-8, max_iter: int = 1000) -> AGResult:
    """Arnold-Gokhale: the joint whose conditionals are closest (forward KL) to the given ones, by the
    fixed-point iteration p <- normalise[(q_{i|j} + q_{j|i}) / (1/p_i + 1/p_j)] from the uniform joint.

    Iterates until the largest change of any probability is below `tol` (each pair stops on its own);
    the paper's fixed 40 iterations is `tol=0, max_iter=40`. The iteration runs on probabilities, not
    logs: every factor is a sum or product of positive float64 numbers, and the exact mode's V x V grids
    make exp/log per entry the dominant cost.
    """
    numerator = log_qi.exp() + log_qj.exp()  # constant across iterations
    n, k_i, k_j = log_qi.shape
    p = torch.full_like(numerator, 1.0 / (k_i * k_j))
    iterations = torch.zeros(n, dtype=torch.long, device=log_qi.device)
    converged = torch.zeros(n, dtype=torch.bool, device=log_qi.device)
    # Only the pairs still moving are iterated; the working set is compacted when some converge, not
    # copied out and back every iteration (the exact mode's grids are V x V).
    index, current, fixed = torch.arange(n, device=log_qi.device), p.clone(), numerator
    updated = torch.empty_like(current)
    for _ in range(max_iter):
        if index.numel() == 0:
            break
        # In place, two grid-sized passes for the update and two for the change: on the exact mode's
        # V x V grids each iteration is bound by memory traffic, not arithmetic.
        inv_i = current.sum(-1, keepdim=True).reciprocal_()  # 1 / marginal of a: (n, K, 1)
        inv_j = current.sum(-2, keepdim=True).reciprocal_()  # 1 / marginal of b: (n, 1, K)
        torch.add(inv_i, inv_j, out=updated)
        torch.div(fixed, updated, out=updated)
        updated /= updated.sum((-2, -1), keepdim=True)
        current.sub_(updated).abs_()
        change = current.flatten(1).amax(-1)
        current, updated = updated, current
        iterations[index] += 1
        done = change <= tol
        if done.any():
            p[index[done]] = current[done]
            converged[index[done]] = True
            index, current, fixed, updated = index[~done], current[~done], fixed[~done], updated[~done]
    p[index] = current  # pairs that ran out of iterations keep their last iterate
    return AGResult(p.clamp_min(torch.finfo(p.dtype).tiny).log(), iterations, converged)


def chain_rule_joint(log_mi: Tensor, log_mj: Tensor, log_qi: Tensor, log_qj: Tensor) -> Tensor:
    """Mask both, predict one, reveal it, predict the other; the two orders' joints averaged.
    Revealing a at i and predicting j is exactly the unary table q_{j|i}(b|a), so no extra passes."""
    i_first = log_mi[..., :, None] + log_qj
    j_first = log_mj[..., None, :] + log_qi
    return normalise_joint(torch.logaddexp(i_first, j_first) - math.log(2.0))


def joint_conditionals(log_p: Tensor) -> tuple[Tensor, Tensor]:
    """(log p_{i|j}(a|b), log p_{j|i}(b|a)) of a joint, in the same layout as the MLM's tables."""
    return log_p - log_p.logsumexp(-2, keepdim=True), log_p - log_p.logsumexp(-1, keepdim=True)


def marginals(log_p: Tensor) -> tuple[Tensor, Tensor]:
    return log_p.logsumexp(-1), log_p.logsumexp(-2)


def _kl(log_q: Tensor, log_p: Tensor, dim: int) -> Tensor:
    """KL(q || p) along `dim`; 0 · log 0 counts as 0."""
    q = log_q.exp()
    return torch.where(q > 0, q * (log_q - log_p), torch.zeros_like(q)).sum(dim)


@dataclass
class PairMetrics:
    """Per-pair figures of one construction (each (N,)); gold tokens sit at index 0 of both candidate lists."""

    pair_nll: Tensor  # -½ log p(a, b): its exp-mean is P-PPL
    unary_nll: Tensor  # -½ [log p_{i|j}(a|b) + log p_{j|i}(b|a)]: its exp-mean is U-PPL
    kl_all: Tensor | None = None  # KL(q || p) averaged over all 2K conditioning values
    kl_gold: Tensor | None = None  # KL(q || p) at the gold conditioning tokens

    def means(self) -> dict[str, float]:
        out = {"p_ppl": math.exp(self.pair_nll.mean().item()), "u_ppl": math.exp(self.unary_nll.mean().item())}
        if self.kl_all is not None and self.kl_gold is not None:
            out |= {"kl_all": self.kl_all.mean().item(), "kl_gold": self.kl_gold.mean().item()}
        return out


def joint_metrics(log_p: Tensor, log_qi: Tensor | None = None, log_qj: Tensor | None = None,
                  gold_a: int = 0, gold_b: int = 0) -> PairMetrics:
    """P-PPL and U-PPL terms of a joint at the gold pair and, given the MLM's tables, its faithfulness."""
    cond_i, cond_j = joint_conditionals(log_p)
    pair_nll = -0.5 * log_p[:, gold_a, gold_b]
    unary_nll = -0.5 * (cond_i[:, gold_a, gold_b] + cond_j[:, gold_a, gold_b])
    if log_qi is None or log_qj is None:
        return PairMetrics(pair_nll, unary_nll)
    kl_i = _kl(log_qi, cond_i, dim=-2)  # (N, K): one KL per conditioning value b
    kl_j = _kl(log_qj, cond_j, dim=-1)  # (N, K): one per a
    kl_all = 0.5 * (kl_i.mean(-1) + kl_j.mean(-1))
    kl_gold = 0.5 * (kl_i[:, gold_b] + kl_j[:, gold_a])
    return PairMetrics(pair_nll, unary_nll, kl_all, kl_gold)


def unary_metrics(log_qi: Tensor, log_qj: Tensor, gold_a: int = 0, gold_b: int = 0) -> PairMetrics:
    """The MLM's own unary conditionals at the gold pair: the reference row for U-PPL (no joint, so no P-PPL)."""
    unary_nll = -0.5 * (log_qi[:, gold_a, gold_b] + log_qj[:, gold_a, gold_b])
    return PairMetrics(torch.full_like(unary_nll, float("nan")), unary_nll)


def incompatibility(log_qi: Tensor, log_qj: Tensor) -> Tensor:
    """Per pair, 0 iff the two conditionals come from one joint: the mean over the grid of
    (c_ab + LSE c - LSE_b' c_ab' - LSE_a' c_a'b)^2 with c = log q_{i|j} - log q_{j|i}."""
    c = log_qi - log_qj
    total = c.flatten(-2).logsumexp(-1)[:, None, None]
    residual = c + total - c.logsumexp(-1, keepdim=True) - c.logsumexp(-2, keepdim=True)
    return residual.pow(2).flatten(1).mean(-1)


def pointwise_dependence(log_p: Tensor, gold_a: int = 0, gold_b: int = 0) -> Tensor:
    """The independence gap of the gold pair under a joint: log p(a, b) - log p_i(a) - log p_j(b), the
    dependency between the two tokens that a factorised prediction discards (pointwise mutual information)."""
    log_pi, log_pj = marginals(log_p)
    return log_p[:, gold_a, gold_b] - log_pi[:, gold_a] - log_pj[:, gold_b]
