import pytest
import torch
import torch.nn.functional as F

from models.attention import BIDIRECTIONAL
from models.backbone import ModelConfig, Transformer
from objectives.ar import AutoregressiveLM
from objectives.base import IGNORE_INDEX
from objectives.hybrid import HybridLM


def make(vocab, **kw) -> HybridLM:
    objective = HybridLM(**kw)
    objective.set_vocabulary(vocab)
    return objective


def model(vocab):
    torch.manual_seed(0)
    return Transformer(ModelConfig(vocab_size=vocab.size, max_len=32, d_model=16, n_layers=2, n_heads=2, d_ff=32,
                                   dropout=0.0, positions="rope")).eval()


def blocks(vocab, rows=6, length=20):
    ids = torch.randint(6, vocab.size, (rows, length), generator=torch.Generator().manual_seed(1))
    ids[:, 0] = vocab.cls_id
    return ids


def test_a_masked_batch_predicts_each_selected_token_from_the_position_before_it(vocab):
    """Oracle: replay the objective's draws (the batch kind, then the corruption), run the corrupted rows
    bidirectionally and score label i with the logits at i - 1."""
    objective, m, ids = make(vocab, causal_share=0.0, span_length=2, mask_rate=0.3), model(vocab), blocks(vocab)
    out = objective.loss({"input_ids": ids}, m, torch.Generator().manual_seed(5))
    replay = torch.Generator().manual_seed(5)
    torch.rand((), generator=replay)  # the batch kind
    corrupted, labels = objective.corrupt(ids, replay)
    logits = m.logits(m(corrupted, attention=BIDIRECTIONAL))
    expected = F.cross_entropy(logits[:, :-1].reshape(-1, vocab.size), labels[:, 1:].reshape(-1),
                               ignore_index=IGNORE_INDEX)
    torch.testing.assert_close(out.loss, expected)
    assert int(out.predicted_tokens) == int((labels != IGNORE_INDEX).sum()) > 0
    assert float(out.extras["causal_batch"][0]) == 0.0


def test_a_causal_batch_is_the_autoregressive_loss(vocab):
    m, ids = model(vocab), blocks(vocab)
    out = make(vocab, causal_share=1.0).loss({"input_ids": ids}, m, torch.Generator().manual_seed(0))
    torch.testing.assert_close(out.loss, AutoregressiveLM().loss({"input_ids": ids}, m).loss)
    assert float(out.extras["causal_batch"][0]) == 1.0 and int(out.predicted_tokens) == ids.numel() - ids.shape[0]


def test_the_share_of_causal_batches_is_the_configured_one(vocab):
    m, ids = model(vocab), blocks(vocab, rows=1, length=8)
    objective = make(vocab, causal_share=0.25)
    kinds = [float(objective.loss({"input_ids": ids}, m, torch.Generator().manual_seed(s)).extras["causal_batch"][0])
             for s in range(400)]
    share = sum(kinds) / len(kinds)
    assert abs(share - 0.25) < 5 * (0.25 * 0.75 / 400) ** 0.5


def test_spans_cover_about_the_mask_rate_in_runs_of_the_span_length(vocab):
    objective = make(vocab, mask_rate=0.15, span_length=3)
    covered = objective.select(torch.zeros(2000, 64, dtype=torch.long), torch.Generator().manual_seed(0))
    p = 0.15 / 3
    assert abs(float(covered[:, 2:].float().mean()) - (1 - (1 - p) ** 3)) < 0.005  # overlaps merge spans
    for row in covered[:200].tolist():  # every run ends at least 3 long, except one cut by the row's end
        runs, length = [], 0
        for hit in row:
            if hit:
                length += 1
            elif length:
                runs.append(length)
                length = 0
        assert all(r >= 3 for r in runs)


@pytest.mark.parametrize("kw,match", [({"causal_share": 1.5}, "causal_share"), ({"span_length": 0}, "span_length"),
                                      ({"mask_prob": 0.5}, "must sum to 1")])
def test_bad_settings_are_refused(kw, match):
    with pytest.raises(ValueError, match=match):
        HybridLM(**kw)
