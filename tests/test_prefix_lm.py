import pytest
import torch
import torch.nn.functional as F

from armlm.models.attention import Attention
from armlm.models.backbone import ModelConfig, Transformer
from armlm.objectives.ar import AutoregressiveLM
from armlm.objectives.prefix_lm import PrefixLM

V = 30


def model(positions="rope"):
    torch.manual_seed(0)
    return Transformer(ModelConfig(vocab_size=V, max_len=32, d_model=16, n_layers=2, n_heads=2, d_ff=32,
                                   dropout=0.0, positions=positions)).eval()


def blocks(rows=4, length=12):
    ids = torch.randint(6, V, (rows, length), generator=torch.Generator().manual_seed(1))
    ids[:, 0] = 2  # [CLS]
    return ids


def test_loss_is_the_suffix_next_token_nll_under_a_hand_built_mask():
    """Oracle: every row's logits from an explicit (T, T) mask (prefix block fully visible, causal after),
    then the cross-entropy of the suffix tokens only."""
    m, ids = model(), blocks()
    objective = PrefixLM()
    lengths = objective.prefix_lengths({"input_ids": ids}, torch.Generator().manual_seed(3))
    out = objective.loss({"input_ids": ids}, m, torch.Generator().manual_seed(3))
    t = ids.shape[1]
    causal = torch.ones(t, t).tril().bool()
    nll, count = 0.0, 0
    for row, n in enumerate(lengths.tolist()):
        allowed = causal.clone()
        allowed[:n, :n] = True
        logits = m.logits(m(ids[row:row + 1], attention=Attention.explicit(allowed[None])))[0]
        nll += F.cross_entropy(logits[n - 1:-1], ids[row, n:], reduction="sum")
        count += t - n
    torch.testing.assert_close(out.loss, nll / count)
    assert int(out.predicted_tokens) == count


def test_prefix_lengths_stay_inside_the_configured_shares_and_leave_a_suffix():
    ids = blocks(rows=2000, length=17)  # 16 ordinary positions per row
    lengths = PrefixLM(0.25, 0.5).prefix_lengths({"input_ids": ids}, torch.Generator().manual_seed(0))
    assert int(lengths.min()) == 1 + 4 and int(lengths.max()) == 1 + 8
    everything = PrefixLM(0.0, 1.0).prefix_lengths({"input_ids": ids}, torch.Generator().manual_seed(0))
    counts = torch.bincount(everything, minlength=17)[1:]  # lengths 1..16: never the whole row
    assert int(everything.min()) == 1 and int(everything.max()) == 16
    assert int(counts.min()) > 2000 / 16 * 0.6 and int(counts.max()) < 2000 / 16 * 1.4  # uniform, ends included
    padded = {"input_ids": ids[:3], "attention_mask": torch.tensor([[1] * 5 + [0] * 12] * 3)}
    assert int(PrefixLM(1.0 - 1e-9, 1.0).prefix_lengths(padded).max()) == 4  # inside the row's real tokens


def test_a_prefix_of_cls_alone_is_the_autoregressive_loss():
    m, ids = model(), blocks()
    out = PrefixLM(0.0, 0.0).loss({"input_ids": ids}, m)
    torch.testing.assert_close(out.loss, AutoregressiveLM().loss({"input_ids": ids}, m).loss)


@pytest.mark.parametrize("positions", ["rope", "learned"])
def test_suffix_predictions_never_see_later_tokens_and_prefix_states_see_the_whole_prefix(positions):
    m, ids = model(positions), blocks(rows=1)
    attention = Attention.prefix([5])
    states = m(ids, attention=attention)
    later = ids.clone()
    later[0, 9:] = (later[0, 9:] - 5) % (V - 6) + 6
    changed = m(later, attention=attention)
    torch.testing.assert_close(changed[:, :9], states[:, :9])  # positions before 9 never see 9..
    inside = ids.clone()
    inside[0, 4] = (inside[0, 4] - 5) % (V - 6) + 6
    assert not torch.allclose(m(inside, attention=attention)[0, 1], states[0, 1])  # the prefix is bidirectional


def test_bad_shares_are_refused_with_the_fix():
    with pytest.raises(ValueError, match="must be <= max_share"):
        PrefixLM(0.6, 0.4)
    with pytest.raises(ValueError, match=r"must be a number in \[0, 1\]"):
        PrefixLM(0.0, 1.5)
    with pytest.raises(ValueError, match="keep a suffix"):
        PrefixLM(1.0, 1.0)
