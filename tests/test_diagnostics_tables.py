"""Tables from forward passes, against brute force on a tiny random model with a 12-token vocabulary."""

import itertools
import math

import pytest
import torch

from armlm.diagnostics import joints
from armlm.diagnostics.pairwise import MLM_CONSTRUCTIONS, ar_pairwise, mlm_pairwise
from armlm.diagnostics.run import pair_contexts
from armlm.diagnostics.scoring import Scorer, choose_candidates, ordinary_tokens
from armlm.diagnostics.sentences import Pair
from armlm.diagnostics.tables import ar_pair_joint, mlm_pair_tables, pseudo_log_likelihood
from armlm.models.attention import BIDIRECTIONAL, CAUSAL, Attention
from armlm.models.backbone import ModelConfig, Transformer

V, MASK, CLS = 12, 4, 2
SPECIAL = [0, 1, 2, 3, 4, 5]
ORDINARY = ordinary_tokens(V, SPECIAL)
SENTENCE = [CLS, 7, 8, 9, 10, 6]


def tiny_model(seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    model = Transformer(ModelConfig(vocab_size=V, max_len=16, d_model=16, n_layers=2, n_heads=2, d_ff=32,
                                    dropout=0.0, init_std=0.5))
    return model.eval()


def close(got, expected):
    """float32 forward passes batched differently agree to ~1e-6 (logits here are large: init_std 0.5)."""
    torch.testing.assert_close(got, expected, atol=2e-5, rtol=0)


def masked_log_probs(model: Transformer, ids: list[int], position: int,
                     attention: Attention = BIDIRECTIONAL) -> torch.Tensor:
    """The model's distribution at `position` over the ordinary tokens, computed directly."""
    with torch.no_grad():
        logits = model.logits(model(torch.tensor([ids]), attention=attention))[0, position].double()
    return logits[ORDINARY].log_softmax(-1)  # indexed by ordinary token id - 6


def replaced(ids: list[int], **at: int) -> list[int]:
    out = list(ids)
    for position, token in at.items():
        out[int(position[1:])] = token
    return out


@pytest.mark.parametrize("pair", [Pair(0, 1, 2, "contiguous"), Pair(0, 2, 5, "random")])
def test_mlm_tables_are_the_model_conditionals(pair):
    model = tiny_model()
    tables = mlm_pair_tables(Scorer(model, batch_size=5), SENTENCE, pair, MASK, ORDINARY, k=None)
    i, j = pair.i, pair.j
    cand_i, cand_j = tables.cand_i[0].tolist(), tables.cand_j[0].tolist()
    assert cand_i[0] == SENTENCE[i] and cand_j[0] == SENTENCE[j] and sorted(cand_i) == list(range(6, V))
    for b_index, b in enumerate(cand_j):
        expected = masked_log_probs(model, replaced(SENTENCE, **{f"p{i}": MASK, f"p{j}": b}), i)
        got = tables.log_qi[0, :, b_index]
        close(got, expected[[a - 6 for a in cand_i]])
    for a_index, a in enumerate(cand_i):
        expected = masked_log_probs(model, replaced(SENTENCE, **{f"p{i}": a, f"p{j}": MASK}), j)
        close(tables.log_qj[0, a_index], expected[[b - 6 for b in cand_j]])
    both = replaced(SENTENCE, **{f"p{i}": MASK, f"p{j}": MASK})
    close(tables.log_mi[0], masked_log_probs(model, both, i)[[a - 6 for a in cand_i]])
    close(tables.log_mj[0], masked_log_probs(model, both, j)[[b - 6 for b in cand_j]])


def test_candidates_follow_the_papers_recipe():
    unary = torch.arange(V, dtype=torch.float64)  # best: 11, 10, 9, ...
    marginal = -torch.arange(V, dtype=torch.float64)  # best: 0, 1, ... (specials must be skipped)
    chosen = choose_candidates(8, unary, marginal, ORDINARY, k=4).tolist()
    assert chosen == [8, 11, 6, 7]  # gold, then the unary's best up to k/2, then the marginal's best
    assert choose_candidates(8, unary, marginal, ORDINARY, k=None).tolist() == [8, 6, 7, 9, 10, 11]
    with pytest.raises(ValueError, match="candidates=7"):
        choose_candidates(8, unary, marginal, ORDINARY, k=7)


def test_restricting_to_the_whole_ordinary_vocabulary_equals_the_exact_mode():
    scorer = Scorer(tiny_model(1))
    pairs = [Pair(0, 1, 2, "contiguous"), Pair(0, 3, 4, "contiguous")]
    exact = mlm_pairwise(scorer, [SENTENCE], pairs, MASK, ORDINARY, k=None)
    restricted = mlm_pairwise(scorer, [SENTENCE], pairs, MASK, ORDINARY, k=6)
    for name in (*MLM_CONSTRUCTIONS, "mlm_unary"):
        torch.testing.assert_close(exact.metrics[name].unary_nll, restricted.metrics[name].unary_nll)
    torch.testing.assert_close(exact.incompatibility, restricted.incompatibility)


class JointOracle:
    """An 'MLM' over sentences [CLS, x1, x2] whose conditionals all come from one known joint p(x1, x2)."""

    def __init__(self, log_p: torch.Tensor) -> None:
        self.log_p = log_p  # (6, 6) over ordinary ids 6..11

    def logits_at(self, input_ids, positions, candidates=None, *, attention=BIDIRECTIONAL):
        rows = []
        for ids, position in zip(input_ids.tolist(), positions.tolist()):
            other = ids[3 - position]
            if other == MASK:  # both masked: the marginal
                dist = self.log_p.logsumexp(1 if position == 1 else 0)
            elif position == 1:
                dist = self.log_p[:, other - 6]
            else:
                dist = self.log_p[other - 6, :]
            logits = torch.full((V,), -1e9, dtype=torch.float64)
            logits[6:] = dist + 3.0  # an arbitrary shift: softmax must not care
            rows.append(logits)
        out = torch.stack(rows)
        return out if candidates is None else out.gather(-1, candidates)


def test_a_model_with_compatible_conditionals_gets_its_joint_back():
    log_p = joints.normalise_joint(3 * torch.randn(1, 6, 6, generator=torch.Generator().manual_seed(2),
                                                   dtype=torch.float64))[0]
    sentences = [[CLS, 6 + a, 6 + b] for a, b in itertools.product(range(6), repeat=2)]
    pairs = [Pair(n, 1, 2, "contiguous") for n in range(len(sentences))]
    result = mlm_pairwise(JointOracle(log_p), sentences, pairs, MASK, ORDINARY, k=None, ag_tol=1e-13,
                          ag_max_iter=20000)
    gold = torch.tensor([-0.5 * log_p[a, b].item() for a, b in itertools.product(range(6), repeat=2)],
                        dtype=torch.float64)
    for name in ("hcb", "ag", "chain_rule"):
        torch.testing.assert_close(result.metrics[name].pair_nll, gold, atol=1e-8, rtol=0)
        assert result.metrics[name].kl_all.max() < 1e-8
    assert result.incompatibility.max() < 1e-12
    assert (result.metrics["mrf"].pair_nll - gold).abs().max() > 0.05  # MRF cannot: see test_joints


def test_ar_joint_is_the_normalised_sentence_probability():
    model = tiny_model(3)
    scorer = Scorer(model, batch_size=7)
    logits = scorer.next_token_logits(torch.tensor(SENTENCE))
    for pair in (Pair(0, 2, 4, "random"), Pair(0, 3, 5, "random"), Pair(0, 1, 2, "contiguous")):
        check_ar_joint(model, scorer, logits, pair)
    # The gold sentence, K sentences once (factors through j and the distribution at j), then K^2 for the tail.
    assert ar_pairwise(scorer, [SENTENCE], [Pair(0, 2, 4, "random")], ORDINARY, k=3).passes == 1 + 3 + 9
    last = Pair(0, 2, len(SENTENCE) - 1, "random")  # nothing after j: no K^2 passes
    assert ar_pairwise(scorer, [SENTENCE], [last], ORDINARY, k=3).passes == 1 + 3


def check_ar_joint(model, scorer, logits, pair):
    joint = ar_pair_joint(scorer, logits, SENTENCE, pair, ORDINARY, k=None)
    scores = {}
    for a, b in itertools.product(range(6, V), repeat=2):
        ids = replaced(SENTENCE, **{f"p{pair.i}": a, f"p{pair.j}": b})
        with torch.no_grad():
            log_probs = model.logits(model(torch.tensor([ids]), attention=CAUSAL))[0].double().log_softmax(-1)
        scores[a, b] = sum(log_probs[t - 1, ids[t]].item() for t in range(1, len(ids)))
    total = math.log(sum(math.exp(s) for s in scores.values()))
    for ai, a in enumerate(joint.cand_i[0].tolist()):
        for bi, b in enumerate(joint.cand_j[0].tolist()):
            assert joint.log_p[0, ai, bi].item() == pytest.approx(scores[a, b] - total, abs=1e-5)


def test_pseudo_log_likelihood_masks_one_position_at_a_time():
    model = tiny_model(4)
    got = pseudo_log_likelihood(Scorer(model, batch_size=2), SENTENCE, MASK)
    for t in range(1, len(SENTENCE)):
        with torch.no_grad():
            ids = replaced(SENTENCE, **{f"p{t}": MASK})
            full = model.logits(model(torch.tensor([ids]), attention=BIDIRECTIONAL))[0, t].double().log_softmax(-1)
        assert got[t - 1].item() == pytest.approx(full[SENTENCE[t]].item(), abs=2e-5)


def test_chunking_does_not_change_scores():
    model = tiny_model(5)
    rows = torch.randint(6, V, (9, 6), generator=torch.Generator().manual_seed(0))
    positions = torch.arange(9) % 6
    torch.testing.assert_close(Scorer(model, batch_size=2).logits_at(rows, positions),
                               Scorer(model, batch_size=64).logits_at(rows, positions))
    torch.testing.assert_close(Scorer(model, batch_size=1).next_token_log_probs(rows, start=2),
                               Scorer(model, batch_size=64).next_token_log_probs(rows, start=2))


def test_prefix_context_gives_the_exact_ar_joint_of_the_cut_sentence_and_its_gap():
    """pair_context=prefix: each pair is scored in its sentence cut after j. The AR joint there is exact at
    2V passes (no tokens after j), and its independence gap equals brute-force enumeration of the cut
    sentence's probability over every (a, b)."""
    model = tiny_model(5)
    scorer = Scorer(model, batch_size=64)
    other = [CLS, 9, 9, 8, 7, 6, 10]
    pairs = [Pair(0, 2, 4, "random"), Pair(1, 1, 2, "contiguous")]
    cut = pair_contexts([SENTENCE, other], pairs, "prefix")
    assert cut == [SENTENCE[:5], other[:3]]
    assert pair_contexts([SENTENCE, other], pairs, "sentence") == [SENTENCE, other]
    result = ar_pairwise(scorer, cut, pairs, ORDINARY, k=None)
    n_ordinary = V - len(SPECIAL)
    assert result.passes == 2 * (1 + n_ordinary)  # per pair: the gold sentence, then V, never V^2
    for n, pair in enumerate(pairs):
        ids = cut[n]
        scores = torch.zeros(n_ordinary, n_ordinary, dtype=torch.double)
        for a, b in itertools.product(range(6, V), repeat=2):
            filled = replaced(ids, **{f"p{pair.i}": a, f"p{pair.j}": b})
            with torch.no_grad():
                log_probs = model.logits(model(torch.tensor([filled]), attention=CAUSAL))[0].double().log_softmax(-1)
            scores[a - 6, b - 6] = sum(log_probs[t - 1, filled[t]] for t in range(1, len(filled)))
        log_p = scores - scores.logsumexp((0, 1))
        a, b = ids[pair.i] - 6, ids[pair.j] - 6
        gap = log_p[a, b] - log_p[a].logsumexp(0) - log_p[:, b].logsumexp(0)
        assert result.gaps["ar_exact"][n].item() == pytest.approx(gap.item(), abs=1e-5)
