"""Per-layer representation diagnostics (issue 5 building blocks) against their definitions."""

import math

import pytest
import torch
from omegaconf import OmegaConf

from armlm.diagnostics.discrepancy import representation_report
from armlm.diagnostics.report import representations_markdown, tensorboard_scalars
from armlm.diagnostics.representations import (
    anisotropy,
    draw_left_masks,
    embedding_geometry,
    linear_cka,
    representation_shift,
    self_similarity,
    sentence_shift,
    sentence_shift_left,
)
from armlm.models.attention import BIDIRECTIONAL, CAUSAL
from armlm.models.backbone import ModelConfig, Transformer


def reference_cka(x: torch.Tensor, y: torch.Tensor) -> float:
    """HSIC form with an explicit centring matrix: tr(K H L H) / sqrt(tr(K H K H) tr(L H L H))."""
    n = x.shape[0]
    h = torch.eye(n, dtype=torch.float64) - 1.0 / n
    k, l_ = x.double() @ x.double().T, y.double() @ y.double().T
    return float(torch.trace(k @ h @ l_ @ h) / torch.sqrt(torch.trace(k @ h @ k @ h) * torch.trace(l_ @ h @ l_ @ h)))


def test_linear_cka_matches_the_hsic_form_and_its_invariances():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(40, 8, generator=g), torch.randn(40, 5, generator=g)
    assert linear_cka(x, y) == pytest.approx(reference_cka(x, y), rel=1e-9)
    q, _ = torch.linalg.qr(torch.randn(8, 8, generator=g, dtype=torch.float64))
    assert linear_cka(x, x) == pytest.approx(1.0)
    assert linear_cka(x, (x.double() @ q) * 3.0 + 1.0) == pytest.approx(1.0)
    assert linear_cka(x, y) < 0.6
    with pytest.raises(ValueError, match="same n"):
        linear_cka(x, y[:10])


def tiny_model() -> Transformer:
    torch.manual_seed(0)
    return Transformer(ModelConfig(vocab_size=30, max_len=16, d_model=16, n_layers=2, n_heads=2, d_ff=32,
                                   dropout=0.0, init_std=0.5)).eval()  # large weights: context matters


def test_representation_shift_is_one_without_masks_and_drops_with_them():
    model = tiny_model()
    ids = torch.randint(6, 30, (4, 12), generator=torch.Generator().manual_seed(1))
    can_mask = torch.ones_like(ids, dtype=torch.bool)
    can_mask[:, 0] = False
    none = representation_shift(model, ids, attention=BIDIRECTIONAL, mask_id=4, rate=0.0, can_mask=can_mask)
    assert len(none) == 2 and all(layer["cosine"] == pytest.approx(1.0) for layer in none)
    shifted = representation_shift(model, ids, attention=BIDIRECTIONAL, mask_id=4, rate=0.4, can_mask=can_mask)
    assert all(layer["cosine"] < 0.999 and layer["cka"] < 0.999 for layer in shifted)
    with pytest.raises(ValueError, match="must be in"):
        representation_shift(model, ids, attention=BIDIRECTIONAL, mask_id=4, rate=1.0, can_mask=can_mask)


def test_sentence_shift_pools_sentences_of_different_lengths():
    model = tiny_model()
    g = torch.Generator().manual_seed(3)
    sentences = [[2, *torch.randint(6, 30, (n,), generator=g).tolist()] for n in (5, 9, 12, 7)]
    assert all(layer["cosine"] == pytest.approx(1.0) and layer["cka"] == pytest.approx(1.0)
               for layer in sentence_shift(model, sentences, attention=BIDIRECTIONAL, mask_id=4, rate=1e-9))
    shifted = sentence_shift(model, sentences, attention=BIDIRECTIONAL, mask_id=4, rate=0.4)
    assert len(shifted) == 2 and all(layer["cosine"] < 0.999 for layer in shifted)
    # One sentence alone: the same figures as the batched function with the same mask draw.
    ids = torch.tensor([sentences[1]])
    can_mask = torch.ones_like(ids, dtype=torch.bool)
    can_mask[:, 0] = False
    assert sentence_shift(model, [sentences[1]], attention=BIDIRECTIONAL, mask_id=4, rate=0.4, seed=5) == \
        representation_shift(model, ids, attention=BIDIRECTIONAL, mask_id=4, rate=0.4, can_mask=can_mask, seed=5)


def test_causal_states_before_the_first_mask_do_not_move():
    model = tiny_model()
    ids = torch.randint(6, 30, (3, 10), generator=torch.Generator().manual_seed(2))
    can_mask = torch.zeros_like(ids, dtype=torch.bool)
    can_mask[:, 6:] = True  # only the tail may be masked: the causal prefix cannot see it
    only_prefix = can_mask.clone()
    only_prefix[:, 6:] = False
    clean = model.layer_states(ids, attention=CAUSAL)
    masked_ids = ids.masked_fill(can_mask, 4)
    masked = model.layer_states(masked_ids, attention=CAUSAL)
    for a, b in zip(clean, masked):
        torch.testing.assert_close(a[:, :6], b[:, :6])
    shift = representation_shift(model, ids, attention=CAUSAL, mask_id=4, rate=0.9, can_mask=can_mask)
    assert all(0 < layer["cosine"] <= 1 for layer in shift)


def random_sentences(lengths: list[int], seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [[2, *torch.randint(6, 30, (n - 1,), generator=g).tolist()] for n in lengths]


def test_left_masks_lie_before_the_cut_and_every_cut_is_drawn():
    sentences = random_sentences([3, 5, 9, 16] * 50, seed=6)
    for rate in (0.15, 0.4, 0.9):
        draws = draw_left_masks(sentences, rate, seed=1)
        for ids, d in zip(sentences, draws):
            assert 2 <= d.cut <= len(ids) - 1  # at least one token on each side of the cut
            assert d.masked == sorted(set(d.masked)) and 1 <= d.masked[0] and d.masked[-1] < d.cut  # never [CLS]
            assert len(d.masked) == max(1, math.floor(rate * (d.cut - 1) + 0.5))
        cuts = {d.cut for ids, d in zip(sentences, draws) if len(ids) == 9}
        assert cuts == set(range(2, 9))  # uniform over every admissible cut: all of them occur in 50 draws
    # Too short for [CLS], a mask and a read token: skipped without consuming a draw, so the others keep theirs.
    long_only = draw_left_masks(sentences[:2], 0.4, seed=3)
    assert draw_left_masks([sentences[0], [2, 7], sentences[1]], 0.4, seed=3) == [long_only[0], None, long_only[1]]


def poisoned_before_the_cut(model: Transformer, cuts: list[int], seen: list[torch.Tensor]):
    """layer_states that records its inputs and returns NaN for every position before the sentence's cut:
    a figure that reads any of them is NaN. Each sentence takes two calls (clean, then corrupted)."""
    real = model.layer_states

    def layer_states(input_ids: torch.Tensor, *, attention) -> list[torch.Tensor]:
        cut = cuts[len(seen) // 2]
        seen.append(input_ids[0].cpu())
        states = [s.clone() for s in real(input_ids, attention=attention)]
        for s in states:
            s[:, :cut] = float("nan")
        return states
    return layer_states


def watched_left_shift(sentences: list[list[int]], seed: int, attention, **settings):
    """sentence_shift_left at k = 0.4 on a tiny model whose states before each cut are NaN (reading one would show
    in the result), with its draws and every (clean, corrupted) input it was given, in order."""
    model = tiny_model()
    draws = draw_left_masks(sentences, 0.4, seed=seed)
    seen: list[torch.Tensor] = []
    model.layer_states = poisoned_before_the_cut(model, [d.cut for d in draws], seen)
    result = sentence_shift_left(model, sentences, attention=attention, mask_id=4, rate=0.4, seed=seed, **settings)
    return result, draws, list(zip(seen[::2], seen[1::2], strict=True))


def test_left_shift_never_reads_the_states_before_the_cut_and_corrupts_only_the_drawn_masks():
    sentences = random_sentences([4, 9, 12, 16], seed=7)
    result, draws, inputs = watched_left_shift(sentences, 2, CAUSAL)
    assert all(math.isfinite(row["cosine"]) and math.isfinite(row["cka"]) for row in result.layers)
    for ids, d, (clean, corrupted) in zip(sentences, draws, inputs):
        assert clean.tolist() == ids
        changed = torch.nonzero(corrupted != clean).squeeze(-1).tolist()
        assert changed == d.masked and set(corrupted[d.masked].tolist()) == {4}
        assert corrupted[d.cut:].tolist() == ids[d.cut:]  # every token read is unchanged


def test_left_shift_matches_a_brute_force_oracle_under_both_attentions():
    model = tiny_model()
    ids = random_sentences([14], seed=8)[0]
    seed = next(s for s in range(100) if len(ids) - draw_left_masks([ids], 0.4, seed=s)[0].cut >= 4)
    draw = draw_left_masks([ids], 0.4, seed=seed)[0]
    corrupted = torch.tensor([ids])
    corrupted[0, draw.masked] = 4
    for attention in (CAUSAL, BIDIRECTIONAL):
        with torch.no_grad():
            clean_states = model.layer_states(torch.tensor([ids]), attention=attention)
            masked_states = model.layer_states(corrupted, attention=attention)
        result = sentence_shift_left(model, [ids], attention=attention, mask_id=4, rate=0.4, seed=seed)
        assert result.read_tokens == len(ids) - draw.cut
        for row, a, b in zip(result.layers, clean_states, masked_states, strict=True):
            a, b = a[0, draw.cut:], b[0, draw.cut:]
            assert row["cosine"] == pytest.approx(float(torch.cosine_similarity(a, b, dim=-1).mean()), abs=1e-6)
            assert row["cka"] == pytest.approx(reference_cka(a, b), abs=1e-6)
        assert min(row["cosine"] for row in result.layers) < 0.999  # the masks do move the tokens read


def test_the_random_token_control_corrupts_the_same_positions_with_ordinary_tokens():
    sentences = random_sentences([5, 9, 12, 16], seed=11)
    ordinary = range(6, tiny_model().config.vocab_size)
    result, draws, inputs = watched_left_shift(sentences, 3, BIDIRECTIONAL, random_ids=torch.tensor(ordinary))
    replaced = []
    for ids, d, (clean, corrupted) in zip(sentences, draws, inputs):
        assert clean.tolist() == ids and corrupted[d.cut:].tolist() == ids[d.cut:]
        changed = (corrupted != clean).nonzero().flatten().tolist()
        assert set(changed) <= set(d.masked)  # only drawn positions change (a draw may repeat the token there)
        replaced += corrupted[d.masked].tolist()
    assert all(t in ordinary for t in replaced) and 4 not in replaced and len(set(replaced)) > 1
    assert result.read_tokens == sum(len(ids) - d.cut for ids, d in zip(sentences, draws))


def test_every_token_read_sees_every_mask_under_both_attentions():
    model = tiny_model()
    sentences = random_sentences([3, 6, 10, 13, 16], seed=9)
    draws = draw_left_masks(sentences, 0.4, seed=4)
    read = [len(ids) - d.cut for ids, d in zip(sentences, draws)]
    expected = sum(len(d.masked) * r for d, r in zip(draws, read)) / sum(read)
    causal, bidirectional = (sentence_shift_left(model, sentences, attention=a, mask_id=4, rate=0.4, seed=4)
                             for a in (CAUSAL, BIDIRECTIONAL))
    assert causal.read_tokens == bidirectional.read_tokens == sum(read)
    assert causal.masks_seen == bidirectional.masks_seen == pytest.approx(expected)
    assert causal.layers != bidirectional.layers  # the same masks, read through different attentions
    with pytest.raises(ValueError, match="sentences.min_tokens"):
        sentence_shift_left(model, [[2, 7], [2]], attention=CAUSAL, mask_id=4, rate=0.4)


def test_representation_report_holds_the_left_shift_beside_the_shift():
    model = tiny_model()
    sentences = random_sentences([6, 9, 12, 16, 8], seed=10)
    cfg = OmegaConf.create({"seed": 1, "representations": {"sentences": 4, "mask_rates": [0.15, 0.4]}})
    part = representation_report(model, sentences, CAUSAL, 4, cfg)
    assert set(part["shift_left"]) == set(part["shift"]) == set(part["shift_left_random"]) == {"0.15", "0.4"}
    assert part["shift_left_random"]["0.4"] != part["shift_left"]["0.4"]  # random tokens, not [MASK]
    assert [row["layer"] for row in part["shift_left"]["0.4"]] == [1, 2]
    assert part["shift_left_masks_seen"]["0.4"] >= part["shift_left_masks_seen"]["0.15"] >= 1
    assert part["shift_left_read_tokens"]["0.4"] >= 4
    assert "left cos k=0.4" in "\n".join(representations_markdown(part))
    tags = {(tag, step) for tag, _, step in tensorboard_scalars({"representations": part})}
    assert {("diagnostics/representations/shift_left_cosine@0.4", 2),
            ("diagnostics/representations/shift_left_cka@0.15", 1)} <= tags


def test_anisotropy_sees_a_common_direction_and_centring_removes_it():
    g = torch.Generator().manual_seed(3)
    isotropic = torch.randn(500, 32, generator=g)
    context = torch.arange(500) // 10
    plain = anisotropy(isotropic, context)
    assert abs(plain["raw"]) < 0.05 and abs(plain["centred"]) < 0.05
    skewed = anisotropy(isotropic + 5.0, context)
    assert skewed["raw"] > 0.9 and abs(skewed["centred"]) < 0.05 and abs(skewed["standardised"]) < 0.05
    with pytest.raises(ValueError, match="two different contexts"):
        anisotropy(isotropic[:5], torch.zeros(5, dtype=torch.long))


def test_self_similarity_is_higher_within_a_type():
    g = torch.Generator().manual_seed(4)
    types = torch.arange(200) % 10
    prototypes = torch.randn(10, 16, generator=g)
    states = prototypes[types] + 0.3 * torch.randn(200, 16, generator=g)
    result = self_similarity(states, types, context=torch.arange(200) // 5)
    assert result["same_type"] > 0.8 and abs(result["different_types"]) < 0.3


def brute_force_self_similarity(states, types, context) -> float:
    """Ethayarajh's definition, pair by pair: per type the mean cosine over its cross-context occurrence
    pairs, then the mean over the types that have any."""
    per_type = []
    for t in types.unique():
        where = torch.nonzero(types == t).squeeze(-1).tolist()
        cosines = [float(torch.cosine_similarity(states[a].double(), states[b].double(), dim=0))
                   for n, a in enumerate(where) for b in where[n + 1:] if context[a] != context[b]]
        if cosines:
            per_type.append(sum(cosines) / len(cosines))
    return sum(per_type) / len(per_type)


@pytest.mark.slow
def test_self_similarity_averages_every_type_equally_over_all_cross_context_pairs():
    """A skewed type distribution (one type holds half the tokens) with far more same-type pairs than the
    old 20,000-pair cap: the figure must equal the per-type mean over every cross-context pair."""
    g = torch.Generator().manual_seed(7)
    n = 600
    types = torch.where(torch.rand(n, generator=g) < 0.5, torch.zeros(n, dtype=torch.long),
                        torch.randint(1, 40, (n,), generator=g))
    context = torch.randint(0, 30, (n,), generator=g)
    states = torch.randn(40, 8, generator=g)[types] + torch.randn(n, 8, generator=g)
    pairs_of_type_0 = int((types == 0).sum()) ** 2 // 2
    assert pairs_of_type_0 > 40_000  # the frequent type alone exceeds the old cap
    result = self_similarity(states, types, context)
    assert result["same_type"] == pytest.approx(brute_force_self_similarity(states, types, context), abs=1e-9)
    covered = sum(1 for t in types.unique() if len(set(context[types == t].tolist())) > 1)
    assert result["types"] == covered


def test_embedding_geometry_reports_every_layer():
    model = tiny_model()
    g = torch.Generator().manual_seed(5)
    sentences = [[2, *torch.randint(6, 12, (8,), generator=g).tolist()] for _ in range(12)]  # repeated types
    layers = embedding_geometry(model, sentences, attention=BIDIRECTIONAL)
    assert len(layers) == 2
    for layer in layers:
        assert set(layer) == {"anisotropy_raw", "anisotropy_centred", "anisotropy_standardised",
                              "self_similarity_same_type", "self_similarity_different_types"}
        assert all(-1 <= v <= 1 for v in layer.values())
        assert abs(layer["anisotropy_centred"]) < layer["anisotropy_raw"] or layer["anisotropy_raw"] < 0.1
