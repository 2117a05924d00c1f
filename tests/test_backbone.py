"""models/backbone.py: causal and bidirectional outputs in every norm and position variant, padding, the SDPA
call, token types, the tied head, BERT-base size, config checks, output masks and rows given their positions."""

import pytest
import torch
import torch.nn.functional as F

from armlm.models.attention import BIDIRECTIONAL, CAUSAL, Attention
from armlm.models.backbone import ModelConfig, Transformer
from tests.helpers.lanes import fast_lane_keeps
from tests.helpers.models import VARIANTS, tiny_model


@pytest.mark.parametrize("norm,positions", VARIANTS)
def test_causal_outputs_ignore_later_tokens(norm, positions):
    model = tiny_model(norm, positions)
    ids = torch.randint(6, 40, (2, 16))
    changed = ids.clone()
    changed[:, 9:] = torch.randint(6, 40, (2, 7))
    with torch.no_grad():
        a = model(ids, attention=CAUSAL)
        b = model(changed, attention=CAUSAL)
    torch.testing.assert_close(a[:, :9], b[:, :9])
    assert not torch.allclose(a[:, 9:], b[:, 9:])


@pytest.mark.parametrize("norm,positions", VARIANTS)
def test_bidirectional_outputs_see_later_tokens(norm, positions):
    model = tiny_model(norm, positions)
    ids = torch.randint(6, 40, (2, 16))
    changed = ids.clone()
    changed[:, 12] = (changed[:, 12] - 6 + 1) % 34 + 6
    with torch.no_grad():
        a = model(ids, attention=BIDIRECTIONAL)
        b = model(changed, attention=BIDIRECTIONAL)
    assert (a[:, :12] - b[:, :12]).abs().amax() > 1e-4


@pytest.mark.parametrize("norm,positions,attention", fast_lane_keeps(
    [(*variant, attention) for variant in VARIANTS
     for attention in [CAUSAL, BIDIRECTIONAL, Attention.prefix(torch.tensor([4]))]],
    keep=[("pre", "learned", CAUSAL), ("post", "rope", BIDIRECTIONAL)]), ids=str)
def test_padding_mask_matches_unpadded_sequence(attention, norm, positions):
    model = tiny_model(norm, positions)
    ids = torch.randint(6, 40, (1, 10))
    padded = torch.cat([ids, torch.zeros(1, 6, dtype=torch.long)], dim=1)
    mask = torch.cat([torch.ones(1, 10), torch.zeros(1, 6)], dim=1).long()
    with torch.no_grad():
        plain = model(ids, attention=attention)
        with_pad = model(padded, attention=attention, attention_mask=mask)
    torch.testing.assert_close(with_pad[:, :10], plain, atol=1e-5, rtol=1e-5)


def test_sdpa_never_gets_a_mask_and_is_causal(monkeypatch):
    calls = []
    real = F.scaled_dot_product_attention

    def spy(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, **kw):
        calls.append((attn_mask is not None, is_causal))
        assert not (attn_mask is not None and is_causal)
        return real(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, **kw)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    model = tiny_model()
    ids = torch.randint(6, 40, (2, 8))
    lower = torch.ones(8, 8, dtype=torch.bool).tril().expand(2, 8, 8)
    for attention in (CAUSAL, BIDIRECTIONAL, Attention.prefix(torch.tensor([3, 5])), Attention.explicit(lower)):
        model(ids, attention=attention)
        model(ids, attention=attention, attention_mask=torch.ones(2, 8, dtype=torch.long))
    # no dense mask where none is needed (causal or bidirectional without padding), one otherwise
    blocks = len(model.blocks)
    assert calls[:blocks] == [(False, True)] * blocks and calls[2 * blocks:3 * blocks] == [(False, False)] * blocks
    assert (False, True) in calls and (True, False) in calls and (False, False) in calls


def test_token_type_ids_change_outputs():
    model = tiny_model()
    ids = torch.randint(6, 40, (1, 8))
    types = torch.tensor([[0, 0, 0, 0, 1, 1, 1, 1]])
    with torch.no_grad():
        plain = model(ids, attention=BIDIRECTIONAL)
        assert not torch.allclose(plain, model(ids, attention=BIDIRECTIONAL, token_type_ids=types))
        torch.testing.assert_close(model(ids, attention=BIDIRECTIONAL),
                                   model(ids, attention=BIDIRECTIONAL, token_type_ids=torch.zeros_like(types)))


def test_lm_head_is_tied_to_the_token_embedding():
    model = tiny_model()
    hidden = torch.randn(3, 32)
    expected = hidden @ model.token_embedding.weight.T + model.lm_bias
    torch.testing.assert_close(model.logits(hidden), expected)
    model.logits(hidden).sum().backward()
    assert model.token_embedding.weight.grad is not None


def test_base_size_is_bert_base():
    cfg = ModelConfig(vocab_size=30522, d_model=768, n_layers=12, n_heads=12, d_ff=3072)
    with torch.device("meta"):
        model = Transformer(cfg)
    # BERT-base without its pooler and MLM transform: ~108.9M parameters.
    assert abs(model.num_parameters() - 108.9e6) / 108.9e6 < 0.005


def test_invalid_configs_are_rejected():
    with pytest.raises(ValueError, match="divisible"):
        ModelConfig(d_model=30, n_heads=4)
    with pytest.raises(ValueError, match="norm_position"):
        ModelConfig(norm_position="middle")
    with pytest.raises(ValueError, match="positions"):
        ModelConfig(positions="alibi")
    with pytest.raises(ValueError, match="max_len"):
        tiny_model()(torch.zeros(1, 33, dtype=torch.long), attention=CAUSAL)



@pytest.mark.parametrize("norm,positions", fast_lane_keeps(VARIANTS, keep=[("post", "rope")]))
def test_output_mask_returns_the_full_forwards_rows_with_gradients(norm, positions):
    """The MLM fast path (last MLP only at scored positions) equals indexing the full output, with padding."""
    model = tiny_model(norm, positions, dropout=0.0).train()
    ids = torch.randint(6, 40, (3, 12))
    attention_mask = torch.ones(3, 12, dtype=torch.long)
    attention_mask[1, 9:] = 0
    keep = torch.rand(3, 12, generator=torch.Generator().manual_seed(1)) < 0.3
    keep[0, 0] = True
    full = model(ids, attention=BIDIRECTIONAL, attention_mask=attention_mask)
    rows = model(ids, attention=BIDIRECTIONAL, attention_mask=attention_mask, output_mask=keep)
    assert rows.shape == (int(keep.sum()), 32)
    torch.testing.assert_close(rows, full[keep], atol=1e-6, rtol=1e-5)
    weights = torch.randn_like(rows)
    grads_full = torch.autograd.grad((full[keep] * weights).sum(), list(model.parameters()), allow_unused=True)
    grads_rows = torch.autograd.grad((rows * weights).sum(), list(model.parameters()), allow_unused=True)
    for a, b in zip(grads_full, grads_rows):
        assert (a is None) == (b is None)
        if a is not None:
            # Summing over fewer rows changes the reduction order: on two threads one element of 1,024 differed by
            # 2.1e-6 (the single-process fast lane), so the tolerance sits above that, far below any real mismatch.
            torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("norm,positions", fast_lane_keeps(VARIANTS, keep=[("pre", "rope")]))
def test_rows_given_their_positions_may_come_in_any_order(norm, positions):
    """position_ids say where each row stands: the default is 0..T-1, and shuffling the rows together with
    their positions (and the mask) shuffles the outputs, as XLNet's appended query rows rely on."""
    model = tiny_model(norm, positions)
    ids = torch.randint(6, 40, (2, 12))
    with torch.no_grad():
        plain = model(ids, attention=BIDIRECTIONAL)
        torch.testing.assert_close(model(ids, attention=BIDIRECTIONAL, position_ids=torch.arange(12).expand(2, 12)),
                                   plain)
        order = torch.randperm(12, generator=torch.Generator().manual_seed(0))
        shuffled = model(ids[:, order], attention=BIDIRECTIONAL, position_ids=order.expand(2, 12))
        torch.testing.assert_close(shuffled, plain[:, order])
        causal = model(ids, attention=CAUSAL)
        allowed = (order[None, :] <= order[:, None])[None].expand(2, 12, 12)  # causal in the original positions
        torch.testing.assert_close(model(ids[:, order], attention=Attention.explicit(allowed),
                                         position_ids=order.expand(2, 12)), causal[:, order])
    with pytest.raises(ValueError, match="below model.max_len"):
        model(ids, attention=BIDIRECTIONAL, position_ids=torch.full((2, 12), 32))


def test_set_dropout_reaches_every_dropout_in_place_and_checks_the_rate():
    """Fine-tuning trains the opened backbone at its own rate (sources.armlm.ArmlmSource.finetune_backbone)."""
    from armlm.common.errors import ArmlmError
    from armlm.models.backbone import SelfAttention

    model = Transformer(ModelConfig(vocab_size=50, d_model=32, n_heads=2, n_layers=2, d_ff=64, max_len=16, dropout=0.1))
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    assert model.set_dropout(0.3) is model and model.config.dropout == 0.3
    assert {m.p for m in model.modules() if isinstance(m, torch.nn.Dropout)} == {0.3}
    assert {m.dropout for m in model.modules() if isinstance(m, SelfAttention)} == {0.3}
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in weights.items())  # the weights as they were
    with pytest.raises(ArmlmError, match="dropout"):
        model.set_dropout(1.5)
