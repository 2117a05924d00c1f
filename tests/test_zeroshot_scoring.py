"""Sentence scores by method against brute force on a tiny model: PLL against a loop over positions, PLL-word-l2r
masking exactly the later subwords of a word, `exact` against the diagnostics' chain rule, the per-sentence bound
against enumeration over every order; which methods each objective has."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from armlm.datamodules.tokenizer import TokenizerSettings, train_tokenizer
from armlm.diagnostics.likelihood import exact_chain_rule_nll, model_masked_scorer
from armlm.diagnostics.scoring import Scorer
from armlm.diagnostics.tables import pseudo_log_likelihood
from armlm.models.attention import BIDIRECTIONAL
from armlm.models.backbone import ModelConfig, Transformer
from armlm.objectives.ar import AutoregressiveLM
from armlm.objectives.hybrid import HybridLM
from armlm.objectives.masked_diffusion import MaskedDiffusionLM
from armlm.objectives.mlm import MaskedLM
from armlm.objectives.plm import PermutationLM
from armlm.sources.armlm import armlm_special_tokens
from armlm.zeroshot.scoring import (
    EncodedSentence,
    SentenceScorer,
    after_context,
    available_methods,
    encode_sentences,
    masked_sets,
)

V, MASK_ID = 12, 4


@pytest.fixture(scope="module")
def model() -> Transformer:
    torch.manual_seed(5)
    net = Transformer(ModelConfig(vocab_size=V, max_len=10, d_model=16, n_layers=2, n_heads=2, d_ff=32, dropout=0.0))
    with torch.no_grad():  # conditionals far from uniform
        for p in net.parameters():
            p.mul_(6.0)
    return net.eval()


def sentence(*tokens: int, words: tuple[int, ...] | None = None) -> EncodedSentence:
    return EncodedSentence((2, *tokens), (-1, *(words if words is not None else range(len(tokens)))))


SENTENCES = [sentence(6, 7, 8), sentence(9, 6, 10, 11, words=(0, 0, 1, 1)), sentence(8, 8, 6),
             sentence(7, 11), sentence(10, 9, 8, 7, 6, words=(0, 1, 1, 1, 2))]


def test_pll_is_a_loop_over_positions_each_masked_alone(model):
    scorer = SentenceScorer(model, MaskedLM, MASK_ID, tokens_per_pass=7)  # several passes per length group
    got = scorer.score(SENTENCES, "pll", progress=False)
    oracle = Scorer(model, batch_size=3)
    for k, s in enumerate(SENTENCES):
        expected = float(pseudo_log_likelihood(oracle, list(s.ids), MASK_ID).sum())
        assert got.log_prob[k] == pytest.approx(expected, abs=1e-5)
        assert got.tokens[k] == len(s.ids) - 1


def test_pll_word_l2r_masks_the_target_and_the_later_subwords_of_its_word_only():
    words = torch.tensor([[-1, 0, 0, 0, 1, 2, 2]])
    masked, read = masked_sets(words, whole_word_right=True)
    got = {int(p): tuple(torch.nonzero(m).flatten().tolist()) for m, p in zip(masked, read)}
    assert got == {1: (1, 2, 3), 2: (2, 3), 3: (3,), 4: (4,), 5: (5, 6), 6: (6,)}
    plain, _ = masked_sets(words, whole_word_right=False)
    assert (plain.sum(1) == 1).all()


def test_pll_word_l2r_is_a_loop_with_the_word_rule_and_equals_pll_on_one_token_words(model):
    scorer = SentenceScorer(model, MaskedLM, MASK_ID)
    l2r = scorer.score(SENTENCES, "pll_word_l2r", progress=False)
    pll = scorer.score(SENTENCES, "pll", progress=False)
    oracle = Scorer(model)
    for k, s in enumerate(SENTENCES):
        ids, words = torch.tensor(s.ids), s.word_ids
        total = 0.0
        for t in range(1, len(ids)):
            row = ids.clone()
            row[[q for q in range(t, len(ids)) if q == t or words[q] == words[t]]] = MASK_ID
            total += float(oracle.logits_at(row[None], torch.tensor([t]), attention=BIDIRECTIONAL)
                           .double().log_softmax(-1)[0, ids[t]])
        assert l2r.log_prob[k] == pytest.approx(total, abs=1e-5)
        if len(set(words[1:])) == len(words) - 1:  # every word one token: nothing more to mask
            assert l2r.log_prob[k] == pytest.approx(pll.log_prob[k], abs=1e-9)
        else:
            assert l2r.log_prob[k] != pytest.approx(pll.log_prob[k], abs=1e-6)


def test_exact_is_the_chain_rule_the_likelihood_diagnostics_compute(model):
    got = SentenceScorer(model, AutoregressiveLM, MASK_ID).score(SENTENCES, "exact", progress=False)
    for k, s in enumerate(SENTENCES):
        result = exact_chain_rule_nll(model, torch.tensor([s.ids]), eod_id=-1)
        assert -got.log_prob[k] == pytest.approx(result.nll_per_token * result.target_tokens, abs=1e-5)
    assert (got.mc_stderr == 0).all()


def every_order_bound(model: Transformer, ids: tuple[int, ...], first: int = 1) -> float:
    """Brute force: -log p_sigma(x) averaged over every order of the targets first..T-1 ([MASK] out of the
    support), the positions before them (the context) always visible."""
    score = model_masked_scorer(model, MASK_ID)
    block = torch.tensor([ids])
    positions = list(range(first, len(ids)))
    total = 0.0
    for order in itertools.permutations(positions):
        for k, i in enumerate(order):
            masked = torch.zeros_like(block, dtype=torch.bool)
            masked[0, list(order[k:])] = True
            total += float(score(block, masked)[0, i])
    return total / math.factorial(len(positions))


@pytest.mark.slow
def test_the_per_sentence_bound_agrees_with_enumeration_over_orders(model):
    short = [s for s in SENTENCES if len(s.ids) <= 5]
    scorer = SentenceScorer(model, MaskedDiffusionLM, MASK_ID, bound_draws=200, seed=3)
    got = scorer.score(short, "bound", progress=False)
    for k, s in enumerate(short):
        exact = every_order_bound(model, s.ids)
        assert -got.log_prob[k] == pytest.approx(exact, abs=max(4 * got.mc_stderr[k], 1e-6))
        assert got.mc_stderr[k] < 0.05 * exact
    # a one-token sentence has one masked set: no Monte-Carlo error at all
    one = scorer.score([sentence(7)], "bound", progress=False)
    assert one.mc_stderr[0] == 0 and -one.log_prob[0] == pytest.approx(every_order_bound(model, (2, 7)), abs=1e-9)


def test_the_bound_is_reproducible_and_its_draws_vary(model):
    a = SentenceScorer(model, MaskedLM, MASK_ID, bound_draws=3, seed=1).score(SENTENCES, "bound", progress=False)
    b = SentenceScorer(model, MaskedLM, MASK_ID, bound_draws=3, seed=1).score(SENTENCES[::-1], "bound", progress=False)
    np.testing.assert_allclose(a.log_prob, b.log_prob[::-1])
    assert (a.mc_stderr[[1, 4]] > 0).all()


def test_methods_are_asked_of_the_objective_class_and_others_are_refused(model):
    assert available_methods(AutoregressiveLM) == ("exact",)
    assert available_methods(MaskedLM) == ("pll", "pll_word_l2r", "bound")
    assert available_methods(PermutationLM) == ("exact",)
    with pytest.raises(ValueError, match="cannot be scored by 'pll'.*'exact'"):
        SentenceScorer(model, AutoregressiveLM, MASK_ID).score(SENTENCES, "pll")
    with pytest.raises(ValueError, match="choose from"):
        SentenceScorer(model, MaskedLM, MASK_ID).score(SENTENCES, "ppl")


def test_sentences_are_encoded_as_blocks_begin_with_word_ids():
    text = "the cat sat on the mat, and the dog slept. cats and dogs sleep unbelievably well. "
    tokenizer = train_tokenizer([text * 20], TokenizerSettings(vocab_size=40, min_frequency=1))
    (s,) = encode_sentences(tokenizer, ["The cats, unbelievably, slept."], armlm_special_tokens(tokenizer))
    assert s.ids[0] == tokenizer.token_to_id("[CLS]") and tokenizer.token_to_id("[SEP]") not in s.ids
    assert s.word_ids[0] == -1 and len(s.word_ids) == len(s.ids)
    pieces = [tokenizer.id_to_token(i) for i in s.ids[1:]]
    for piece, word, before in zip(pieces[1:], s.word_ids[2:], s.word_ids[1:-1]):
        assert (word == before) == piece.startswith("##")  # a word's later pieces are its ## subwords
    with pytest.raises(ValueError, match="no tokens"):
        encode_sentences(tokenizer, ["   "], armlm_special_tokens(tokenizer))


def in_context(*tokens: int, context: int) -> EncodedSentence:
    """[CLS], then `context` tokens conditioned on, then the targets."""
    return EncodedSentence((2, *tokens), (-1, *range(len(tokens))), first_target=1 + context)


CONTINUATIONS = [in_context(6, 7, 8, 9, context=2), in_context(9, 6, 10, context=1), in_context(8, 8, 6, 7, context=2),
                 in_context(7, 11, 6, 10, 9, context=3)]


def test_a_continuation_scores_only_its_own_tokens_with_the_context_visible_and_never_masked(model):
    oracle = Scorer(model)
    exact = SentenceScorer(model, AutoregressiveLM, MASK_ID).score(CONTINUATIONS, "exact", progress=False)
    pll = SentenceScorer(model, MaskedLM, MASK_ID, tokens_per_pass=9).score(CONTINUATIONS, "pll", progress=False)
    for k, s in enumerate(CONTINUATIONS):
        ids = torch.tensor(s.ids)
        chain = oracle.next_token_log_probs(ids[None], start=s.first_target).double().sum()
        assert exact.log_prob[k] == pytest.approx(float(chain), abs=1e-5)
        total = 0.0
        for t in range(s.first_target, len(ids)):
            row = ids.clone()
            row[t] = MASK_ID
            total += float(oracle.logits_at(row[None], torch.tensor([t])).double().log_softmax(-1)[0, ids[t]])
        assert pll.log_prob[k] == pytest.approx(total, abs=1e-5)
        assert exact.tokens[k] == pll.tokens[k] == len(ids) - s.first_target
    # a context changes the score of the same continuation
    alone = SentenceScorer(model, AutoregressiveLM, MASK_ID).score([sentence(8, 9)], "exact", progress=False)
    assert alone.log_prob[0] != pytest.approx(exact.log_prob[0], abs=1e-4)


def test_greedy_says_whether_every_target_is_the_top_token_where_it_is_read(model):
    scorer = SentenceScorer(model, AutoregressiveLM, MASK_ID)
    first = torch.tensor([[2, 6]])
    top = int(Scorer(model).next_token_logits(first[0])[-1].argmax())
    other = next(v for v in range(5, V) if v != top)
    got = scorer.score([in_context(6, top, context=1), in_context(6, other, context=1)], "exact", progress=False)
    assert got.greedy.tolist() == [True, False]
    assert SentenceScorer(model, MaskedLM, MASK_ID).score(CONTINUATIONS, "bound", progress=False).greedy is None


def test_the_bound_of_a_continuation_masks_only_the_continuation(model):
    scorer = SentenceScorer(model, MaskedDiffusionLM, MASK_ID, bound_draws=200, seed=3)
    got = scorer.score(CONTINUATIONS[:3], "bound", progress=False)
    for k, s in enumerate(CONTINUATIONS[:3]):
        exact = every_order_bound(model, s.ids, s.first_target)
        assert -got.log_prob[k] == pytest.approx(exact, abs=max(4 * got.mc_stderr[k], 1e-6))


def test_an_encoded_sentence_needs_a_target_after_its_context():
    with pytest.raises(ValueError, match="at least one target"):
        EncodedSentence((2, 6, 7), (-1, 0, 1), first_target=3)


def test_a_masked_next_token_checkpoint_is_read_one_position_before_the_masked_token(model):
    """GPT-BERT's PLL: mask token t alone, read log q(x_t) at position t - 1 (a loop over positions; [MASK] stays in
    the PLL's support, as training leaves it there; the bound always takes it out)."""
    got = SentenceScorer(model, HybridLM, MASK_ID, tokens_per_pass=7).score(SENTENCES, "pll", progress=False)
    for k, s in enumerate(SENTENCES):
        ids = torch.tensor(s.ids)
        expected = 0.0
        for t in range(1, len(ids)):
            with torch.no_grad():
                states = model(ids.masked_fill(torch.arange(len(ids)) == t, MASK_ID)[None], attention=BIDIRECTIONAL)
                logits = model.logits(states)[0, t - 1].float()
            expected += float(logits.log_softmax(-1)[ids[t]])
        assert got.log_prob[k] == pytest.approx(expected, abs=1e-5)
    # the bound reads there too: one token, one masked set, read at [CLS]
    bound = SentenceScorer(model, HybridLM, MASK_ID).score([sentence(7)], "bound", progress=False)
    with torch.no_grad():
        logits = model.logits(model(torch.tensor([[2, MASK_ID]]), attention=BIDIRECTIONAL))[0, 0].float()
    logits[MASK_ID] = float("-inf")
    assert bound.log_prob[0] == pytest.approx(float(logits.log_softmax(-1)[7]), abs=1e-5)


@pytest.mark.parametrize("method", ["exact", "pll", "pll_word_l2r", "bound"])
def test_a_sentence_after_an_empty_context_block_scores_as_it_does_alone(model, method):
    plain = [sentence(6, 7, 8), sentence(9, 6), sentence(8, 8, 6, 7)]
    assert [after_context(s, ()) for s in plain] == plain
    objective = AutoregressiveLM if method == "exact" else MaskedLM
    alone = SentenceScorer(model, objective, MASK_ID).score(plain, method, progress=False)
    empty = SentenceScorer(model, objective, MASK_ID).score([after_context(s, ()) for s in plain], method, progress=False)
    assert np.array_equal(alone.log_prob, empty.log_prob) and np.array_equal(alone.tokens, empty.tokens)


def test_a_context_block_is_read_before_the_sentence_and_never_scored(model):
    s = EncodedSentence((2, 6, 7, 8), (-1, 0, 1, 1))
    placed = after_context(s, (9, 10))
    assert placed == EncodedSentence((2, 9, 10, 6, 7, 8), (-1, -1, -1, 0, 1, 1), first_target=3)
    twice = after_context(placed, (11,))  # a block before a continuation's own context
    assert twice.ids == (2, 11, 9, 10, 6, 7, 8) and twice.first_target == 4
    scores = SentenceScorer(model, AutoregressiveLM, MASK_ID).score([placed], "exact", progress=False)
    chain = Scorer(model).next_token_log_probs(torch.tensor(placed.ids)[None], start=3).double().sum()
    assert scores.tokens[0] == 3 and scores.log_prob[0] == pytest.approx(float(chain), abs=1e-5)
