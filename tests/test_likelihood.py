"""The any-order likelihood bound against brute force (../shared/specs/likelihood-bounds.md, section 5): exact
enumeration of every order on a tiny model, a model whose conditionals come from one known joint, the
stratified estimator, and the masked-diffusion training loss, whose expectation is the same bound; and the
unigram NLL of the same targets that the bound and the exact NLL are read against."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from armlm.common.vocabulary import Vocabulary, smoothed_unigram_nll
from armlm.diagnostics.likelihood import (
    any_order_bound,
    exact_chain_rule_nll,
    model_masked_scorer,
    random_subsets,
    stratified_sizes,
    target_positions,
    unigram_nll_without_eod,
)
from armlm.models.attention import CAUSAL
from armlm.models.backbone import ModelConfig, Transformer
from armlm.objectives.masked_diffusion import MaskedDiffusionLM
from tests.helpers.lanes import fast_lane_keeps
from tests.helpers.vocabularies import make_vocabulary

V, L = 10, 4  # 6 special ids + 4 ordinary tokens; [CLS] then L targets
MASK_ID, EOD_ID = 4, 5


@pytest.fixture(scope="module")
def model() -> Transformer:
    torch.manual_seed(3)
    net = Transformer(ModelConfig(vocab_size=V, max_len=8, d_model=16, n_layers=2, n_heads=2, d_ff=32, dropout=0.0))
    with torch.no_grad():  # larger weights than the initialisation: conditionals far from uniform
        for p in net.parameters():
            p.mul_(8.0)
    return net.eval()


def blocks_of(*rows: list[int]) -> torch.Tensor:
    return torch.tensor([[2, *row] for row in rows])  # 2 = [CLS]


def nll_at(score, block: torch.Tensor, masked_positions: set[int], i: int) -> float:
    masked = torch.zeros_like(block, dtype=torch.bool)
    masked[0, sorted(masked_positions)] = True
    return float(score(block, masked)[0, i])


def every_order_nll(score, block: torch.Tensor) -> float:
    """Brute force: -log p_sigma(x) averaged over all L! orders, each revealing one position at a time."""
    positions = list(range(1, block.shape[1]))
    total = 0.0
    for order in itertools.permutations(positions):
        total += sum(nll_at(score, block, set(order[k:]), order[k]) for k in range(len(order)))
    return total / math.factorial(len(positions))


def every_subset_bound(score, block: torch.Tensor) -> float:
    """The discrete formula: sum over m of the mean over all size-m sets M of (1/m) sum_{i in M} l_i(M)."""
    positions = list(range(1, block.shape[1]))
    total = 0.0
    for m in range(1, len(positions) + 1):
        subsets = list(itertools.combinations(positions, m))
        total += sum(sum(nll_at(score, block, set(s), i) for i in s) / m for s in subsets) / len(subsets)
    return total


@pytest.mark.parametrize("row, strata", fast_lane_keeps([([6, 9, 7, 6], 2), ([6, 9, 7, 6, 8], 3)],
                                                         keep=[([6, 9, 7, 6], 2)]))  # groups 2+2; 1+2+2
def test_every_order_equals_the_subset_formula_and_the_estimator_agrees(model, row, strata):
    score = model_masked_scorer(model, MASK_ID)
    block = blocks_of(row)
    by_order, by_subset = every_order_nll(score, block), every_subset_bound(score, block)
    assert by_order == pytest.approx(by_subset, rel=1e-12)
    estimate = any_order_bound(score, block, strata=strata, draws=400, max_draws=400, target_rel_stderr=0.0,
                               seed=1, progress=False)
    assert estimate.kind == "upper_bound" and estimate.target_tokens == len(row) and estimate.draws == 400
    assert abs(estimate.nll_per_token - by_subset / len(row)) < 4 * estimate.mc_stderr
    assert 0 < estimate.mc_stderr < 0.05 * estimate.nll_per_token
    assert estimate.nll_per_token_without_eod == estimate.nll_per_token and estimate.eod_targets == 0


def test_the_reported_standard_error_matches_the_spread_of_estimates(model):
    score = model_masked_scorer(model, MASK_ID)
    block = blocks_of([6, 9, 7, 6, 8])
    runs = [any_order_bound(score, block, strata=3, draws=4, max_draws=4, target_rel_stderr=0.0, seed=seed,
                            progress=False) for seed in range(40)]
    spread = torch.tensor([r.nll_per_token for r in runs]).std().item()
    reported = sum(r.mc_stderr for r in runs) / len(runs)
    assert 0.6 < spread / reported < 1.6
    assert not runs[0].target_met  # target 0 is never met: reported, not hidden


def lookup_scorer(joint: dict[tuple[int, ...], float]) -> object:
    """Conditionals of one known joint over L positions: q(x_i | visible) marginalises the other masked ones."""
    def score(blocks: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(blocks.shape, dtype=torch.float64)
        for r in range(blocks.shape[0]):
            x, hidden = blocks[r, 1:].tolist(), masked[r, 1:].tolist()
            agree = {seq: p for seq, p in joint.items()
                     if all(h or seq[k] == x[k] for k, h in enumerate(hidden))}
            z = sum(agree.values())
            for k, h in enumerate(hidden):
                if h:
                    out[r, k + 1] = -math.log(sum(p for seq, p in agree.items() if seq[k] == x[k]) / z)
        return out
    return score


def test_conditionals_of_one_joint_give_its_exact_nll():
    g = torch.Generator().manual_seed(0)
    tokens = (6, 7, 8)
    weights = torch.rand(len(tokens) ** L, generator=g, dtype=torch.float64) + 0.05
    joint = {seq: float(w) for seq, w in zip(itertools.product(tokens, repeat=L), weights / weights.sum())}
    score = lookup_scorer(joint)
    for x in [(6, 7, 8, 6), (8, 8, 7, 6)]:
        block = blocks_of(list(x))
        assert every_subset_bound(score, block) == pytest.approx(-math.log(joint[x]), rel=1e-12)
        assert every_order_nll(score, block) == pytest.approx(-math.log(joint[x]), rel=1e-12)
        # The estimator too (its single masked sets still vary: only each size's average is the joint's share)
        estimate = any_order_bound(score, block, strata=2, draws=200, max_draws=200, target_rel_stderr=0.0, seed=0,
                                   progress=False)
        assert abs(estimate.nll_per_token * L + math.log(joint[x])) < 4 * estimate.mc_stderr * L


def test_stratified_sizes_estimate_a_sum_over_every_size_without_bias():
    """sum_s group_s f(size_s) averages to sum_{m=1..L} f(m) for rows of different lengths (unequal groups)."""
    lengths = torch.tensor([7, 5, 13]).repeat(20_000)
    sizes, group = stratified_sizes(lengths, 3, torch.Generator().manual_seed(4))
    estimates = (group * sizes.double() ** 2).sum(1).reshape(-1, 3).mean(0)
    exact = torch.tensor([sum(m * m for m in range(1, n + 1)) for n in (7, 5, 13)], dtype=torch.float64)
    assert torch.allclose(estimates, exact, rtol=0.01)


def test_stratified_sizes_cover_every_size_and_subsets_have_them():
    g = torch.Generator().manual_seed(0)
    lengths = torch.tensor([7, 7, 5])
    seen = set()
    for _ in range(300):
        sizes, group = stratified_sizes(lengths, 3, g)
        assert (group.sum(1) == lengths).all() and (group >= 1).all()
        seen.update(sizes[0].tolist())
        assert ((sizes >= 1) & (sizes <= lengths[:, None])).all()
    assert seen == set(range(1, 8))
    targets = target_positions(torch.zeros(3, 8, dtype=torch.long))
    targets[2, 6:] = False  # a row with 5 targets
    masked = random_subsets(targets, torch.tensor([3, 7, 5]), g)
    assert masked.sum(1).tolist() == [3, 7, 5] and not (masked & ~targets).any()


def test_the_estimator_doubles_its_draws_until_the_standard_error_is_small(model):
    score = model_masked_scorer(model, MASK_ID)
    blocks = blocks_of([6, 9, 7, 6], [7, 7, 8, 9], [9, 6, 6, 8])
    result = any_order_bound(score, blocks, strata=4, draws=2, max_draws=1024, target_rel_stderr=0.02, seed=2,
                             progress=False)
    assert result.mc_stderr <= 0.02 * result.nll_per_token and 2 < result.draws < 1024
    capped = any_order_bound(score, blocks, strata=4, draws=2, max_draws=4, target_rel_stderr=1e-6, seed=2,
                             progress=False)
    assert capped.draws == 4  # stops at max_draws and reports the standard error it reached
    with pytest.raises(ValueError, match="draws >= 2"):
        any_order_bound(score, blocks, strata=4, draws=1, max_draws=4, target_rel_stderr=0.01, seed=2)


def test_the_training_loss_is_an_unbiased_estimate_of_the_bound(model):
    """MDLM's NELBO (continuous form, t ~ U(eps, 1]) averaged over many draws equals the discrete bound per token."""
    block = blocks_of([6, 9, 7, 6])
    exact = every_subset_bound(model_masked_scorer(model, MASK_ID), block) / L
    objective = MaskedDiffusionLM()  # eps = 1e-3: rates below it are never drawn, a bias of about eps x the NLL
    objective.set_vocabulary(make_vocabulary(V))
    batch = {"input_ids": block.repeat(1024, 1)}
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        losses = torch.stack([objective.loss(batch, model, g).loss for _ in range(64)]).double()
    # Each loss averages 1024 sequences; the 64 losses' spread gives the standard error of their mean.
    stderr = float(losses.std()) / math.sqrt(len(losses))
    assert abs(float(losses.mean()) - exact) < 4 * stderr + 2e-3 * exact


def test_an_ar_checkpoints_exact_nll_is_its_chain_rule(model):
    block = blocks_of([6, 9, 7, EOD_ID], [7, 7, 8, 9])
    with torch.no_grad():
        log_probs = torch.log_softmax(model.logits(model(block, attention=CAUSAL)).double(), dim=-1)
    terms = {(r, t): -float(log_probs[r, t - 1, block[r, t]]) for r in range(2) for t in range(1, L + 1)}
    result = exact_chain_rule_nll(model, block, EOD_ID)
    assert result.kind == "exact" and result.target_tokens == 2 * L and result.eod_targets == 1
    assert result.nll_per_token == pytest.approx(sum(terms.values()) / (2 * L), rel=1e-5)
    assert result.nll_per_token_without_eod == pytest.approx((sum(terms.values()) - terms[(0, 4)]) / 7, rel=1e-5)
    assert result.blocks_stderr > 0  # another sample of blocks would move it, exact or not


def test_the_bound_without_eod_leaves_out_the_eod_targets_terms(model):
    score = model_masked_scorer(model, MASK_ID)
    block = blocks_of([6, 9, EOD_ID, 6])
    both = any_order_bound(score, block, strata=2, draws=4, max_draws=4, target_rel_stderr=0.0, seed=3,
                           eod_id=EOD_ID, progress=False)
    assert both.eod_targets == 1 and both.nll_per_token_without_eod != both.nll_per_token
    exact_terms = every_subset_bound(score, block)  # all four positions' terms
    eod_terms = 0.0  # position 3's terms alone: sum over m of E_{|M|=m, 3 in M} (1/m) l_3(M) P(3 in M)
    for m in range(1, L + 1):
        subsets = [s for s in itertools.combinations(range(1, L + 1), m)]
        eod_terms += sum(nll_at(score, block, set(s), 3) / m for s in subsets if 3 in s) / len(subsets)
    expected = (exact_terms - eod_terms) / (L - 1)
    assert abs(both.nll_per_token_without_eod - expected) < 6 * both.mc_stderr + 1e-3


def test_the_smoothed_unigram_is_add_a_half_over_the_ids_it_keeps():
    # ids 0-5 special; 0 and 2-5 excluded, [UNK] (1) kept. Kept counts 0, 1, 2, 3 -> add 1/2: 1/2, 3/2, 5/2, 7/2
    # of 8, so p = 1/16, 3/16, 5/16, 7/16 whatever the excluded ids' counts.
    train = np.array([40, 0, 100, 100, 7, 50, 1, 2, 3])
    excluded = (0, 2, 3, 4, 5)
    scored = np.array([0, 1, 5, 0, 0, 0, 1, 0, 2])  # [UNK] once, id 6 once, id 8 twice; the [CLS]s are dropped
    expected = -(math.log(1 / 16) + math.log(3 / 16) + 2 * math.log(7 / 16)) / 4
    assert smoothed_unigram_nll(train, scored, excluded) == pytest.approx(expected, rel=1e-12)
    # Training's val/unigram_baseline shares it, [UNK] excluded too: p = 3/2, 5/2, 7/2 of 15/2 for ids 6, 7, 8.
    vocab = Vocabulary(9, 0, 1, 2, 3, 4, 5, unigram_counts=train)
    training = -(math.log(1.5 / 7.5) + 2 * math.log(3.5 / 7.5)) / 3
    assert vocab.unigram_nll_of_counts(scored) == pytest.approx(training, rel=1e-12)
    with pytest.raises(ValueError, match="no ordinary tokens"):
        smoothed_unigram_nll(train, np.array([3, 0, 0, 0, 0, 0, 0, 0, 0]), excluded)


def test_the_unigram_of_the_blocks_scores_their_targets_but_eod():
    train = np.array([0, 1, 0, 0, 0, 9, 2, 3, 4, 0])  # id 9 never seen in training: p = (0 + 1/2) / z
    excluded = (0, 2, 3, 4, EOD_ID)
    blocks = blocks_of([6, 9, EOD_ID, 1], [7, 7, 8, EOD_ID])
    z = sum(c + 0.5 for i, c in enumerate(train) if i not in excluded)
    targets = [6, 9, 1, 7, 7, 8]  # after [CLS], [EOD] left out, [UNK] kept
    expected = -sum(math.log((train[t] + 0.5) / z) for t in targets) / len(targets)
    assert unigram_nll_without_eod(blocks, train, excluded, EOD_ID) == pytest.approx(expected, rel=1e-12)
    with pytest.raises(ValueError, match=r"special ids \[4\]"):
        unigram_nll_without_eod(blocks_of([6, MASK_ID, 7, 8]), train, excluded, EOD_ID)
