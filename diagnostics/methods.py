"""How a checkpoint is scored, chosen by its objective class's `scoring` (objectives.base), never by the
objective's name or its attention: the pair joints, the joint the independence gap is read from, the
sequence score, and what an exact pair joint costs inside a whole sentence.

    chain_rule     left-to-right factors (AR): exact pair joints, log-likelihood and perplexity; on held-out
                   blocks the exact NLL
    conditionals   each token given all the others (MLM): the joint constructions, pseudo-log-likelihood; on
                   held-out blocks the any-order likelihood bound (diagnostics.likelihood)

A new objective whose checkpoints are scored another way gets a ScoringMethod here and names it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from omegaconf import DictConfig
from torch import Tensor

from armlm.common.errors import ArmlmError
from armlm.diagnostics.likelihood import LikelihoodResult, any_order_bound, exact_chain_rule_nll, model_masked_scorer
from armlm.diagnostics.pairwise import PairwiseResult, ar_pairwise, mlm_pairwise
from armlm.diagnostics.scoring import Scorer
from armlm.diagnostics.sentences import Pair
from armlm.diagnostics.tables import Candidates, ar_log_likelihood, pseudo_log_likelihood
from armlm.objectives.base import Objective
from armlm.sources.base import Reading, as_reading


@dataclass(frozen=True)
class ScoringMethod:
    name: str
    # (scorer, sentences, pairs, mask_id, ordinary tokens, K or None for exact, evaluate config, given candidates)
    pairwise: Callable[[Scorer, list[list[int]], list[Pair], int, Tensor, int | None, DictConfig,
                        list[Candidates] | None], PairwiseResult]
    headline_joint: str  # the joint the independence gap is read from
    sequence: Callable[[Scorer, list[int], int], Tensor]  # per-token log scores of one sentence (scorer, ids, mask_id)
    sequence_name: str  # what the summed scores are
    perplexity_name: str  # exp(-mean score): perplexity and pseudo-perplexity are different quantities
    # Forward passes of an exact pair joint (every ordinary token a candidate), as a function of V: inside the
    # whole sentence, and in the sentence cut after the pair (pair_context=prefix).
    exact_sentence_passes: Callable[[int], int]
    exact_prefix_passes: Callable[[int], int]
    # The NLL per target token of held-out blocks (scorer, blocks, mask_id, eod_id, evaluate config): exact, or a
    # bound.
    likelihood: Callable[[Scorer, Tensor, int, int, DictConfig], LikelihoodResult]


def _chain_rule_pairs(scorer: Scorer, sentences: list[list[int]], pairs: list[Pair], mask_id: int, ordinary: Tensor,
                      k: int | None, cfg: DictConfig, given: list[Candidates] | None) -> PairwiseResult:
    return ar_pairwise(scorer, sentences, pairs, ordinary, k, given=given)


def _conditional_pairs(scorer: Scorer, sentences: list[list[int]], pairs: list[Pair], mask_id: int, ordinary: Tensor,
                       k: int | None, cfg: DictConfig, given: list[Candidates] | None) -> PairwiseResult:
    return mlm_pairwise(scorer, sentences, pairs, mask_id, ordinary, k, ag_tol=cfg.ag.tol, ag_max_iter=cfg.ag.max_iter,
                        given=given)


def _chain_rule_likelihood(scorer: Scorer, blocks: Tensor, mask_id: int, eod_id: int,
                           cfg: DictConfig) -> LikelihoodResult:
    return exact_chain_rule_nll(scorer.model, blocks, eod_id, batch_size=int(cfg.batch_size),
                                next_states=scorer.next_states, excluded=scorer.excluded)


def _conditional_likelihood(scorer: Scorer, blocks: Tensor, mask_id: int, eod_id: int,
                            cfg: DictConfig) -> LikelihoodResult:
    settings = cfg.likelihood
    return any_order_bound(model_masked_scorer(scorer.model, mask_id, int(cfg.batch_size)), blocks,
                           strata=int(settings.strata), draws=int(settings.draws), max_draws=int(settings.max_draws),
                           target_rel_stderr=float(settings.target_rel_stderr), seed=int(cfg.seed), eod_id=eod_id)


METHODS = {
    "chain_rule": ScoringMethod(
        "chain_rule", _chain_rule_pairs, "ar_exact", lambda scorer, ids, mask_id: ar_log_likelihood(scorer, ids),
        # inside a sentence a pass per (a, b) for the tokens after j; in the prefix one per a
        "log_likelihood", "ppl", exact_sentence_passes=lambda v: v * v, exact_prefix_passes=lambda v: v,
        likelihood=_chain_rule_likelihood),
    "conditionals": ScoringMethod(
        "conditionals", _conditional_pairs, "ag", pseudo_log_likelihood, "pseudo_log_likelihood", "pseudo_ppl",
        exact_sentence_passes=lambda v: 2 * v, exact_prefix_passes=lambda v: 2 * v,  # a unary table per position
        likelihood=_conditional_likelihood),
}


def scoring_method(reading: Reading | type[Objective]) -> ScoringMethod:
    reading = as_reading(reading)
    reading.refuse_unless_language_model("the diagnostics (`armlm evaluate`)")
    method = METHODS.get(reading.scoring)
    if method is None:
        raise ArmlmError(f"{reading.name} declares scoring={reading.scoring!r}, which the diagnostics do not implement "
                         f"({sorted(METHODS)}); add its ScoringMethod to diagnostics/methods.py")
    if method.name == "conditionals" and reading.masked_prediction_offset:
        raise ArmlmError(f"{reading.name} predicts a masked token {reading.masked_prediction_offset} place(s) "
                         "before it; the MLM joint constructions read it in place. Score it by the chain rule, or "
                         "zero-shot (`armlm zeroshot`), which reads it where it was trained")
    return method
