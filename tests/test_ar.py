import torch
import torch.nn.functional as F

from armlm.models.attention import CAUSAL
from armlm.models.backbone import ModelConfig, Transformer
from armlm.objectives.ar import AutoregressiveLM


def model(vocab_size=30):
    torch.manual_seed(0)
    return Transformer(ModelConfig(vocab_size=vocab_size, max_len=32, d_model=16, n_layers=1, n_heads=2, d_ff=32,
                                   dropout=0.0)).eval()


def test_loss_is_next_token_cross_entropy():
    m = model()
    ids = torch.randint(6, 30, (3, 12))
    out = AutoregressiveLM().loss({"input_ids": ids}, m)
    logits = m.logits(m(ids, attention=CAUSAL))
    expected = F.cross_entropy(logits[:, :-1].reshape(-1, 30), ids[:, 1:].reshape(-1))
    torch.testing.assert_close(out.loss, expected)
    assert int(out.predicted_tokens) == 3 * 11 and int(out.input_tokens) == 36


def test_padding_positions_carry_no_loss_and_do_not_count():
    m = model()
    ids = torch.randint(6, 30, (1, 8))
    padded = torch.cat([ids, torch.zeros(1, 4, dtype=torch.long)], dim=1)
    mask = torch.tensor([[1] * 8 + [0] * 4])
    plain = AutoregressiveLM().loss({"input_ids": ids}, m)
    with_pad = AutoregressiveLM().loss({"input_ids": padded, "attention_mask": mask}, m)
    torch.testing.assert_close(with_pad.loss, plain.loss, atol=1e-5, rtol=1e-5)
    assert int(with_pad.predicted_tokens) == 7 and int(with_pad.input_tokens) == 8


def test_later_tokens_do_not_change_earlier_losses():
    m = model()
    ids = torch.randint(6, 30, (1, 10))
    changed = ids.clone()
    changed[0, 6:] = (changed[0, 6:] - 5) % 24 + 6
    per_token = lambda x: F.cross_entropy(m.logits(m(x, attention=CAUSAL))[0, :-1], x[0, 1:], reduction="none")
    torch.testing.assert_close(per_token(ids)[:5], per_token(changed)[:5])
