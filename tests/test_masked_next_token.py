"""GPT-BERT's masked half against its reference (ltgoslo/gpt-bert, pretraining/dataset.py): span lengths uniform
in {1, 2, 3}, whole spans selected, one corruption draw per span, the 30 % -> 15 % rate schedule, and the masked
token predicted from the position before it."""

import pytest
import torch
import torch.nn.functional as F
from hydra.utils import instantiate

from armlm.models.attention import BIDIRECTIONAL
from armlm.models.backbone import ModelConfig, Transformer
from armlm.objectives.base import IGNORE_INDEX, TrainingProgress
from armlm.objectives.masked_next_token import MaskedNextTokenLM, span_starts
from tests.helpers.configs import tiny_config


def make(vocab, **kw) -> MaskedNextTokenLM:
    objective = MaskedNextTokenLM(**kw)
    objective.set_vocabulary(vocab)
    return objective


def blocks(vocab, rows=6, length=20, seed=1):
    ids = torch.randint(6, vocab.size, (rows, length), generator=torch.Generator().manual_seed(seed))
    ids[:, 0] = vocab.cls_id
    return ids


def runs_of(starts: torch.Tensor) -> list[int]:
    """Span lengths of one row from its per-position span starts, the last (cut by the row's end) left out."""
    first = sorted(set(starts.tolist()))
    return [b - a for a, b in zip(first, first[1:])]


def test_span_lengths_are_uniform_over_the_configured_set():
    starts = span_starts((500, 64), torch.tensor([1, 2, 3]), torch.Generator().manual_seed(0), torch.device("cpu"))
    lengths = torch.tensor([n for row in starts for n in runs_of(row)])
    shares = torch.bincount(lengths, minlength=4)[1:].float() / len(lengths)
    assert torch.allclose(shares, torch.full((3,), 1 / 3), atol=0.01), shares
    assert bool((starts <= torch.arange(64)).all()) and bool((starts[:, 0] == 0).all())


def test_whole_spans_are_selected_and_corrupted_alike(vocab):
    objective = make(vocab, mask_rate=0.3, mask_rate_start=None, mask_prob=0.5, random_prob=0.0, keep_prob=0.5)
    ids = blocks(vocab, rows=400, length=64)
    generator = torch.Generator().manual_seed(3)
    selected, starts = objective.select(ids, generator)
    # every position of a span shares its selection; the rows' one special token is [CLS] at 0, never selected,
    # so the first span is read from its second position
    first_span = starts == 0
    leader = selected.gather(1, torch.where(first_span, torch.ones_like(starts), starts))
    assert bool((selected[:, 1:] == leader[:, 1:]).all())
    corrupted, labels = objective.corrupt(ids, torch.Generator().manual_seed(4))
    _, starts = objective.select(ids, torch.Generator().manual_seed(4))
    masked = corrupted == vocab.mask_id
    chosen = (labels != IGNORE_INDEX) & (starts > 0)
    # per span, all [MASK] or none: the keep/[MASK] draw is the span's
    assert bool((masked[chosen] == masked.gather(1, starts)[chosen]).all())
    per_token = make(vocab, mask_rate=0.3, mask_rate_start=None, corruption="token", mask_prob=0.5, random_prob=0.0,
                     keep_prob=0.5)
    corrupted, labels = per_token.corrupt(ids, torch.Generator().manual_seed(4))
    _, starts = objective.select(ids, torch.Generator().manual_seed(4))  # the same draws select the same spans
    masked, chosen = corrupted == vocab.mask_id, (labels != IGNORE_INDEX) & (starts > 0)
    assert not bool((masked[chosen] == masked.gather(1, starts)[chosen]).all())  # token draws do mix inside spans


@pytest.mark.parametrize("tokens_seen,rate", [(0, 0.3), (500, 0.225), (1000, 0.15), (None, 0.15)])
def test_the_mask_rate_falls_from_start_to_end_over_the_budget(vocab, tokens_seen, rate):
    objective = make(vocab, mask_rate=0.15, mask_rate_start=0.3)
    assert objective.needs_progress
    objective.set_progress(None if tokens_seen is None else TrainingProgress(tokens_seen, 1000))
    assert objective.rate == pytest.approx(rate)
    ids = blocks(vocab, rows=2000, length=64)
    selected, _ = objective.select(ids, torch.Generator().manual_seed(0))
    ordinary = 63  # every position but [CLS]
    share = float(selected.sum(1).float().mean()) / ordinary
    # floor(n r + u) has mean n r; whole spans add about (E[span] - 1) / 2 = 0.5 positions past the count per row
    assert rate <= share <= rate + 1.0 / ordinary, share
    assert int(selected.sum(1).min()) >= int(ordinary * rate)


def test_each_selected_token_is_predicted_from_the_position_before_it(vocab):
    """Oracle: replay the corruption, run the corrupted rows bidirectionally and score label i at i - 1."""
    objective = make(vocab, mask_rate=0.3)
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=vocab.size, max_len=32, d_model=16, n_layers=2, n_heads=2, d_ff=32,
                                    dropout=0.0, positions="rope")).eval()
    ids = blocks(vocab)
    out = objective.loss({"input_ids": ids}, model, torch.Generator().manual_seed(5))
    corrupted, labels = objective.corrupt(ids, torch.Generator().manual_seed(5))
    logits = model.logits(model(corrupted, attention=BIDIRECTIONAL))
    expected = F.cross_entropy(logits[:, :-1].reshape(-1, vocab.size), labels[:, 1:].reshape(-1),
                               ignore_index=IGNORE_INDEX)
    torch.testing.assert_close(out.loss, expected)
    assert int(out.predicted_tokens) == int((labels != IGNORE_INDEX).sum()) > 0
    assert float(out.extras["mask_rate"][0]) == pytest.approx(0.3)


@pytest.mark.parametrize("kw,match", [({"span_lengths": []}, "span_lengths"), ({"span_lengths": [0, 2]}, "span_lengths"),
                                      ({"corruption": "word"}, "corruption"), ({"mask_rate_start": 1.5}, "mask_rate_start"),
                                      ({"mask_prob": 0.5}, "must sum to 1")])
def test_bad_settings_are_refused(kw, match):
    with pytest.raises(ValueError, match=match):
        MaskedNextTokenLM(**kw)


def test_each_span_draws_mask_random_or_keep_in_the_configured_shares(vocab):
    """BERT's 80/10/10 drawn once per span (the reference's span_random_numbers): over ~9,000 spans each share
    is within 0.01 of its setting. A random draw can repeat the original token (1 in 44 ordinary ids here), so
    the keep share may exceed 0.1 by about 0.1 / 44."""
    objective = make(vocab, mask_rate=0.3, mask_rate_start=None, mask_prob=0.8, random_prob=0.1, keep_prob=0.1)
    ids = blocks(vocab, rows=1000, length=64, seed=5)
    corrupted, labels = objective.corrupt(ids, torch.Generator().manual_seed(6))
    _, starts = objective.select(ids, torch.Generator().manual_seed(6))  # the same draws select the same spans
    chosen = (labels != IGNORE_INDEX) & (starts > 0)  # spans after [CLS]'s, whose leader is their first token
    leaders = chosen & (starts == torch.arange(ids.shape[1]))
    masked = (corrupted == vocab.mask_id)[leaders].float().mean()
    kept = (corrupted == ids)[leaders].float().mean()
    assert int(leaders.sum()) > 8000
    assert masked == pytest.approx(0.8, abs=0.01) and kept == pytest.approx(0.1, abs=0.01)
    assert 1 - masked - kept == pytest.approx(0.1, abs=0.01)


def test_the_hybrid_hands_its_progress_to_the_masked_rows_schedule(vocab, tmp_path, cache_dir):
    """objective=hybrid as composed by Hydra: the mask rate its masked component uses follows the run's tokens."""
    hybrid = instantiate(tiny_config(tmp_path, cache_dir, "objective=hybrid").objective)
    hybrid.set_vocabulary(vocab)
    assert hybrid.needs_progress
    for progress, rate in [(TrainingProgress(0, 1000), 0.3), (TrainingProgress(500, 1000), 0.225), (None, 0.15)]:
        hybrid.set_progress(progress)
        assert hybrid.parts["masked"].rate == pytest.approx(rate)
