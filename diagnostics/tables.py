"""From a checkpoint's forward passes to the tables the constructions read.

MLM: the two-masked conditionals and the two K x K unary tables of a pair (2K - 2 passes after a first
batch of 4 that also picks the candidates), and pseudo-log-likelihood. AR: exact sentence log-likelihood
and the exact pairwise joint over the candidates (K^2 passes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from armlm.common.errors import ArmlmError
from armlm.diagnostics.joints import normalise_joint
from armlm.diagnostics.scoring import choose_candidates
from armlm.diagnostics.sentences import Pair
from armlm.models.attention import BIDIRECTIONAL, Attention


class MaskedLogits(Protocol):
    """What the MLM tables need from a model: logits at one position per row (see Scorer.logits_at)."""

    def logits_at(self, input_ids: Tensor, positions: Tensor, candidates: Tensor | None = None, *,
                  attention: Attention = BIDIRECTIONAL) -> Tensor: ...


class NextTokenScores(Protocol):
    """What the AR side needs (see Scorer)."""

    def next_token_log_probs(self, input_ids: Tensor, start: int = 1, stop: int | None = None) -> Tensor: ...

    def logits_at(self, input_ids: Tensor, positions: Tensor, candidates: Tensor | None = None, *,
                  attention: Attention = BIDIRECTIONAL) -> Tensor: ...

    def next_token_logits(self, ids: Tensor) -> Tensor: ...

    def scores_and_next(self, input_ids: Tensor, start: int, stop: int) -> tuple[Tensor, Tensor]: ...


@dataclass
class PairTables:
    """A batch of pairs (leading dim N); token ids of the candidates with the gold token at index 0."""

    cand_i: Tensor  # (N, K)
    cand_j: Tensor  # (N, K)
    log_mi: Tensor  # (N, K) log q_{i|-S}, renormalised over the candidates
    log_mj: Tensor  # (N, K)
    logit_i: Tensor  # (N, K, K) raw logit of a at i when j holds b
    logit_j: Tensor  # (N, K, K) raw logit of b at j when i holds a

    @property
    def log_qi(self) -> Tensor:
        return self.logit_i.log_softmax(-2)

    @property
    def log_qj(self) -> Tensor:
        return self.logit_j.log_softmax(-1)

    @staticmethod
    def stack(tables: list[PairTables]) -> PairTables:
        return PairTables(*(torch.cat([getattr(t, f) for t in tables]) for f in PairTables.__dataclass_fields__))


Candidates = tuple[Tensor, Tensor]  # token ids at i and at j, gold first


def _candidates(given: Candidates | None, gold_a: int, gold_b: int, choose) -> Candidates:
    """The candidates passed in (checked to start with the gold tokens), or the model's own choice."""
    if given is None:
        return choose()
    cand_i, cand_j = (torch.as_tensor(c, dtype=torch.long) for c in given)
    if int(cand_i[0]) != gold_a or int(cand_j[0]) != gold_b:
        raise ArmlmError("the given candidates do not start with this pair's gold tokens: they were chosen "
                         "for other text (another tokenizer, data or seed)")
    return cand_i, cand_j


def mlm_pair_tables(model: MaskedLogits, ids: list[int], pair: Pair, mask_id: int, ordinary: Tensor,
                    k: int | None, given: Candidates | None = None) -> PairTables:
    """`given` candidates (e.g. another checkpoint's, so two models are scored on the same K x K sets)
    replace the model's own choice."""
    x = torch.tensor(ids)
    i, j = pair.i, pair.j
    gold_a, gold_b = int(x[i]), int(x[j])
    both = x.clone()
    both[[i, j]] = mask_id
    only_i, only_j = x.clone(), x.clone()  # one position masked, the other at its gold token
    only_i[i] = mask_id
    only_j[j] = mask_id
    first = model.logits_at(torch.stack([both, both, only_i, only_j]), torch.tensor([i, j, i, j])).double()
    cand_i, cand_j = _candidates(given, gold_a, gold_b, lambda: (
        choose_candidates(gold_a, unary=first[2], marginal=first[0], ordinary=ordinary, k=k),
        choose_candidates(gold_b, unary=first[3], marginal=first[1], ordinary=ordinary, k=k)))
    size = len(cand_i)

    # The rows with the other token at its gold value were already run above; the rest go in one batch.
    rows_i = only_i.repeat(size - 1, 1)
    rows_i[:, j] = cand_j[1:]
    rows_j = only_j.repeat(size - 1, 1)
    rows_j[:, i] = cand_i[1:]
    positions = torch.tensor([i] * (size - 1) + [j] * (size - 1))
    candidates = torch.cat([cand_i.expand(size - 1, -1), cand_j.expand(size - 1, -1)])
    rest = model.logits_at(torch.cat([rows_i, rows_j]), positions, candidates).double()

    logit_i = torch.cat([first[2, cand_i][:, None], rest[: size - 1].T], dim=1)  # [a, b]
    logit_j = torch.cat([first[3, cand_j][None, :], rest[size - 1:]], dim=0)  # [a, b]
    return PairTables(cand_i[None], cand_j[None], first[0, cand_i].log_softmax(-1)[None],
                      first[1, cand_j].log_softmax(-1)[None], logit_i[None], logit_j[None])


def pseudo_log_likelihood(model: MaskedLogits, ids: list[int], mask_id: int) -> Tensor:
    """log q(x_t | x_-t) for every token after [CLS] (Salazar et al. 2020): one masked copy per position,
    normalised over the whole vocabulary as in training."""
    x = torch.tensor(ids)
    positions = torch.arange(1, len(ids))
    rows = x.repeat(len(positions), 1)
    rows[torch.arange(len(positions)), positions] = mask_id
    log_probs = model.logits_at(rows, positions).double().log_softmax(-1)
    return log_probs.gather(-1, x[positions][:, None]).squeeze(-1)


def ar_log_likelihood(model: NextTokenScores, ids: list[int]) -> Tensor:
    """log p(x_t | x_<t) for every token after [CLS]: the exact chain-rule factors."""
    return model.next_token_log_probs(torch.tensor(ids)[None], start=1)[0].double()


@dataclass
class ARJoint:
    cand_i: Tensor  # (1, K)
    cand_j: Tensor  # (1, K)
    log_p: Tensor  # (1, K, K) exact p(a, b | rest) renormalised over the candidates


def ar_pair_joint(model: NextTokenScores, next_token_logits: Tensor, ids: list[int], pair: Pair,
                  ordinary: Tensor, k: int | None, given: Candidates | None = None) -> ARJoint:
    """The AR model's exact joint of two positions given the rest of the sentence on both sides,
    p(a, b | rest) ∝ p(sentence with a at i and b at j), over the candidates.

    By the chain rule the factors before j see a but not b, so they come from K sentences (one per a),
    whose distribution at j - 1 also gives p(b | ..) for every b; only the tokens after j need all K^2
    combinations. Cost: K + K^2 passes (K when j is the last token, as in the prefix context, where the exact
    mode K = V is affordable); inside whole sentences the exact mode is only feasible for tiny vocabularies. `next_token_logits` (T, V), from one causal pass of the gold sentence,
    propose the candidates: the top of p(x_i | x_<i) and of p(x_j | x_<j), unless `given`.
    """
    x = torch.tensor(ids)
    i, j = pair.i, pair.j
    at_i, at_j = next_token_logits[i - 1], next_token_logits[j - 1]
    cand_i, cand_j = _candidates(given, int(x[i]), int(x[j]), lambda: (
        choose_candidates(int(x[i]), unary=at_i, marginal=at_i, ordinary=ordinary, k=k),
        choose_candidates(int(x[j]), unary=at_j, marginal=at_j, ordinary=ordinary, k=k)))
    size = len(cand_i)
    with_a = x.repeat(size, 1)
    with_a[:, i] = cand_i
    # Tokens before i are the same in every row, so their factors cancel in the normalisation. One pass per
    # row gives the factors of x_i = a .. x_{j-1} and the distribution of x_j.
    through, at_j = model.scores_and_next(with_a, start=i, stop=j)
    through_j = through.double().sum(-1)
    b_given_a = at_j.double()[:, cand_j]  # (K, K): log p(x_j = b | x_<j with a)
    scores = through_j[:, None] + b_given_a
    if j < len(ids) - 1:
        grid = with_a.repeat_interleave(size, 0)
        grid[:, j] = cand_j.repeat(size)
        scores = scores + model.next_token_log_probs(grid, start=j + 1).double().sum(-1).view(size, size)
    return ARJoint(cand_i[None], cand_j[None], normalise_joint(scores[None]))
