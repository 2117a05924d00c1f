import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from armlm.common.vocabulary import Vocabulary
from armlm.models.attention import BIDIRECTIONAL
from armlm.models.backbone import ModelConfig, Transformer
from armlm.objectives.base import IGNORE_INDEX
from armlm.objectives.mlm import MaskedLM

TRIPLES = [(0.8, 0.1, 0.1), (1.0, 0.0, 0.0), (0.8, 0.0, 0.2), (0.8, 0.2, 0.0), (0.0, 0.2, 0.8), (0.0, 0.0, 1.0)]


def within(observed: float, expected: float, n: int, sigmas: float = 5.0) -> bool:
    return abs(observed - expected) <= sigmas * math.sqrt(max(expected * (1 - expected), 1e-12) / n) + 1e-12


def sample_inputs(vocab, shape=(400, 256), seed=1):
    """>= 100k positions, ~10% of them special tokens."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(6, vocab.size, shape, generator=g)
    specials = torch.tensor(vocab.special_ids)[torch.randint(0, 6, shape, generator=g)]
    return torch.where(torch.rand(shape, generator=g) < 0.1, specials, ids)


def make_objective(vocab, **kw) -> MaskedLM:
    objective = MaskedLM(**kw)
    objective.set_vocabulary(vocab)
    return objective


@pytest.mark.parametrize("mask_prob,random_prob,keep_prob", TRIPLES)
def test_selection_rate_and_split_match_the_configuration(vocab, mask_prob, random_prob, keep_prob):
    objective = make_objective(vocab, mask_rate=0.15, mask_prob=mask_prob, random_prob=random_prob,
                               keep_prob=keep_prob)
    ids = sample_inputs(vocab)
    corrupted, labels = objective.corrupt(ids, torch.Generator().manual_seed(0))
    ordinary = ~torch.isin(ids, torch.tensor(vocab.special_ids))
    selected = labels != IGNORE_INDEX
    n_ordinary, n_sel = int(ordinary.sum()), int(selected.sum())
    assert n_ordinary >= 90_000
    assert within(n_sel / n_ordinary, 0.15, n_ordinary)

    masked = selected & (corrupted == vocab.mask_id)
    unchanged = selected & (corrupted == ids)
    replaced = selected & ~masked & ~unchanged
    # A random draw can hit the original token: P(unchanged) = keep + random * q(original).
    q = torch.as_tensor(vocab.unigram_counts, dtype=torch.float64)
    q[list(vocab.special_ids)] = 0
    q /= q.sum()
    hit = float(q[ids[selected]].mean())
    assert within(masked.sum().item() / n_sel, mask_prob, n_sel)
    assert within(unchanged.sum().item() / n_sel, keep_prob + random_prob * hit, n_sel)
    assert within(replaced.sum().item() / n_sel, random_prob * (1 - hit), n_sel)


def test_special_tokens_are_never_selected_and_labels_are_ignored_elsewhere(vocab):
    objective = make_objective(vocab, mask_rate=0.9)
    ids = sample_inputs(vocab)
    corrupted, labels = objective.corrupt(ids, torch.Generator().manual_seed(0))
    special = torch.isin(ids, torch.tensor(vocab.special_ids))
    selected = labels != IGNORE_INDEX
    assert not (selected & special).any()
    assert torch.equal(corrupted[special], ids[special])
    assert torch.equal(labels[selected], ids[selected])
    assert torch.equal(corrupted[~selected], ids[~selected])  # unselected positions are untouched


@pytest.mark.parametrize("replacement", ["unigram", "uniform"])
def test_random_replacements_follow_the_distribution_and_skip_specials(vocab, replacement):
    objective = make_objective(vocab, mask_rate=1.0, mask_prob=0.0, random_prob=1.0, keep_prob=0.0,
                               replacement=replacement)
    ids = torch.full((500, 400), 7)
    corrupted, _ = objective.corrupt(ids, torch.Generator().manual_seed(3))
    assert not torch.isin(corrupted, torch.tensor(vocab.special_ids)).any()
    counts = np.bincount(corrupted.flatten().numpy(), minlength=vocab.size).astype(float)
    weights = vocab.unigram_counts.astype(float) if replacement == "unigram" else np.ones(vocab.size)
    weights[list(vocab.special_ids)] = 0
    expected = weights / weights.sum()
    observed = counts / counts.sum()
    n = counts.sum()
    assert np.all(np.abs(observed - expected) <= 5 * np.sqrt(expected * (1 - expected) / n) + 1e-9)


def test_corruption_is_reproducible_from_the_generator_seed(vocab):
    objective = make_objective(vocab)
    ids = sample_inputs(vocab, shape=(8, 64))
    a = objective.corrupt(ids, torch.Generator().manual_seed(5))
    b = objective.corrupt(ids, torch.Generator().manual_seed(5))
    c = objective.corrupt(ids, torch.Generator().manual_seed(6))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[1], c[1])


def test_sparse_head_equals_dense_head_and_never_builds_full_logits(vocab, monkeypatch):
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=vocab.size, max_len=64, d_model=32, n_layers=2, n_heads=2,
                                    d_ff=64, dropout=0.0))
    objective = make_objective(vocab)
    ids = sample_inputs(vocab, shape=(6, 48))
    shapes = []
    real_lm_nll = model.lm_nll
    monkeypatch.setattr(model, "lm_nll", lambda h, y: shapes.append(tuple(h.shape)) or real_lm_nll(h, y))
    out = objective.loss({"input_ids": ids}, model, torch.Generator().manual_seed(9))
    monkeypatch.undo()

    corrupted, labels = objective.corrupt(ids, torch.Generator().manual_seed(9))
    dense_logits = model.logits(model(corrupted, attention=BIDIRECTIONAL))  # B x T x V
    dense = F.cross_entropy(dense_logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX)
    torch.testing.assert_close(out.loss, dense)
    n_selected = int((labels != IGNORE_INDEX).sum())
    assert shapes == [(n_selected, 32)]
    assert int(out.predicted_tokens) == n_selected
    share, count = out.extras["mask_share"]  # the [MASK] share of the inputs (the discrepancy studies read it)
    assert count == ids.numel()
    assert float(share) == pytest.approx((corrupted == vocab.mask_id).sum().item() / ids.numel())


@pytest.mark.parametrize("mask_rate,mask_prob", [(0.15, 0.8), (0.4, 0.8), (0.15, 0.0)])
def test_logged_mask_share_is_mask_rate_times_mask_prob_of_ordinary_tokens(vocab, mask_rate, mask_prob):
    random_prob = (1 - mask_prob) / 2
    objective = make_objective(vocab, mask_rate=mask_rate, mask_prob=mask_prob, random_prob=random_prob,
                               keep_prob=1 - mask_prob - random_prob)
    model = Transformer(ModelConfig(vocab_size=vocab.size, max_len=256, d_model=16, n_layers=1, n_heads=2,
                                    d_ff=32, dropout=0.0))
    ids = sample_inputs(vocab, shape=(100, 256))
    share, _ = objective.loss({"input_ids": ids}, model, torch.Generator().manual_seed(3)).extras["mask_share"]
    ordinary = (~objective.is_special[ids]).float().mean().item()
    already_masked = (ids == vocab.mask_id).float().mean().item()  # sample_inputs draws [MASK] among its specials
    assert within(float(share) - already_masked, mask_rate * mask_prob * ordinary, ids.numel())


@pytest.mark.parametrize("kwargs,match", [
    ({"mask_prob": 0.8, "random_prob": 0.1, "keep_prob": 0.2}, "sum to 1"),
    ({"mask_prob": 0.5, "random_prob": 0.1, "keep_prob": 0.1}, "sum to 1"),
    ({"mask_rate": 1.5}, "outside"),
    ({"mask_rate": -0.1}, "outside"),
    ({"mask_prob": 1.2, "random_prob": -0.2, "keep_prob": 0.0}, "outside"),
    ({"replacement": "zipf"}, "replacement"),
])
def test_invalid_masking_settings_are_rejected(kwargs, match):
    with pytest.raises(ValueError, match=match):
        MaskedLM(**kwargs)


def test_fixed_count_predicts_berts_number_of_ordinary_positions_per_sequence():
    objective = MaskedLM(fixed_count=True)
    objective.set_vocabulary(Vocabulary(300, 0, 1, 2, 3, 4, 5, unigram_counts=np.ones(300, dtype=np.int64)))
    ids = torch.randint(6, 300, (64, 40), generator=torch.Generator().manual_seed(0))
    ids[:, 0], ids[:8, 1:35] = 2, 5  # [CLS] first; eight rows with only five ordinary tokens
    labels = objective.corrupt(ids, torch.Generator().manual_seed(1))[1]
    per_row = (labels != IGNORE_INDEX).sum(1)
    assert objective.per_sequence(40) == 6  # round(0.15 x 40)
    assert (per_row[8:] == 6).all() and (per_row[:8] == 5).all()  # all five where a row has fewer
    assert not objective.is_special[ids[labels != IGNORE_INDEX]].any()
    # each ordinary position is drawn at the same rate: 6 of the 39 ordinary positions of the full rows
    share = (labels[8:] != IGNORE_INDEX).float().mean(0)[1:]
    assert share.mean().item() == pytest.approx(6 / 39, abs=1e-6)
    with pytest.raises(ValueError, match="fixed_count='yes' must be true or false"):
        MaskedLM(fixed_count="yes")
