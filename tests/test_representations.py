"""Per-layer representation diagnostics (issue 5 building blocks) against their definitions."""

import pytest
import torch

from diagnostics.representations import (
    anisotropy,
    embedding_geometry,
    linear_cka,
    representation_shift,
    self_similarity,
    sentence_shift,
)
from models.attention import BIDIRECTIONAL, CAUSAL
from models.backbone import ModelConfig, Transformer


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
