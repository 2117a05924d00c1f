import pytest
import torch
import torch.nn.functional as F

import models.attention
import models.backbone
from models.attention import (
    BIDIRECTIONAL,
    CAUSAL,
    EXPLICIT_KERNEL_MAX_LEN,
    Attention,
    attention_share,
    explicit_attention,
    sdpa_arguments,
    uses_explicit_kernel,
)
from models.backbone import ModelConfig, Transformer

VARIANTS = [("pre", "learned"), ("post", "learned"), ("pre", "rope"), ("post", "rope")]


def tiny_model(norm: str = "pre", positions: str = "learned", **kw) -> Transformer:
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=40, max_len=32, d_model=32, n_layers=2, n_heads=4, d_ff=64,
                      norm_position=norm, positions=positions, **kw)
    return Transformer(cfg).eval()


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


@pytest.mark.parametrize("attention", [CAUSAL, BIDIRECTIONAL, Attention.prefix(torch.tensor([4]))], ids=str)
@pytest.mark.parametrize("norm,positions", VARIANTS)
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



@pytest.mark.parametrize("norm,positions", VARIANTS)
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


def allowed_by_definition(kind: str, lengths: list[int], padding: list[list[int]], t: int) -> torch.Tensor:
    """allowed[b, q, k] written out from the definitions, one entry at a time: a key at padding is never
    seen; causal sees k <= q; prefix sees k <= q or k inside row b's first lengths[b] tokens."""
    allowed = torch.zeros(len(padding), t, t, dtype=torch.bool)
    for b in range(len(padding)):
        for q in range(t):
            for k in range(t):
                visible = {"causal": k <= q, "bidirectional": True, "prefix": k <= q or k < lengths[b]}[kind]
                allowed[b, q, k] = visible and padding[b][k] == 1
    return allowed


def with_float_mask(model: Transformer, ids: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """Hidden states when every layer's SDPA gets -inf where `allowed` is False (an additive float mask,
    not the boolean one models.attention builds)."""
    bias = torch.zeros(allowed.shape).masked_fill(~allowed, float("-inf"))[:, None]
    real = F.scaled_dot_product_attention

    def with_bias(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, **kw):
        return real(q, k, v, attn_mask=bias, dropout_p=dropout_p)

    F.scaled_dot_product_attention = with_bias
    try:
        return model(ids, attention=BIDIRECTIONAL)
    finally:
        F.scaled_dot_product_attention = real


@pytest.mark.parametrize("kind", ["causal", "bidirectional", "prefix"])
def test_each_pattern_with_padding_matches_its_definition(kind):
    model = tiny_model().eval()
    ids = torch.randint(6, 40, (3, 9))
    lengths, padding = [0, 4, 9], [[1] * 9, [1] * 7 + [0] * 2, [1] * 5 + [0] * 4]
    attention = Attention.prefix(lengths) if kind == "prefix" else Attention.named(kind)
    expected = with_float_mask(model, ids, allowed_by_definition(kind, lengths, padding, 9))
    with torch.no_grad():
        got = model(ids, attention=attention, attention_mask=torch.tensor(padding))
        explicit = model(ids, attention=Attention.explicit(allowed_by_definition(kind, lengths, [[1] * 9] * 3, 9)),
                         attention_mask=torch.tensor(padding))
    real = torch.tensor(padding).bool()
    torch.testing.assert_close(got[real], expected[real], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(explicit[real], expected[real], atol=1e-5, rtol=1e-5)


def test_prefix_attention_is_bidirectional_inside_each_prefix_and_causal_after():
    model = tiny_model().eval()
    ids = torch.randint(6, 40, (3, 9))
    lengths = torch.tensor([0, 4, 9])
    with torch.no_grad():
        prefix = model(ids, attention=Attention.prefix(lengths))
        # a prefix of 0 is causal attention, a whole-row prefix is bidirectional
        torch.testing.assert_close(prefix[0], model(ids[:1], attention=CAUSAL)[0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(prefix[2], model(ids[2:], attention=BIDIRECTIONAL)[0], atol=1e-5, rtol=1e-5)
        # inside the prefix a position sees the later prefix tokens: changing token 3 moves position 1
        changed = ids.clone()
        changed[1, 3] = (changed[1, 3] + 1 - 6) % 34 + 6
        moved = model(changed, attention=Attention.prefix(lengths))
        assert (moved[1, 1] - prefix[1, 1]).abs().amax() > 1e-4
        # after the prefix attention is causal: a change at position 6 leaves positions 0-5 as they were
        later = ids.clone()
        later[1, 6] = (later[1, 6] + 1 - 6) % 34 + 6
        torch.testing.assert_close(model(later, attention=Attention.prefix(lengths))[1, :6], prefix[1, :6])


def test_a_query_with_nothing_to_attend_to_attends_to_itself_not_nan():
    model = tiny_model().eval()
    ids = torch.randint(6, 40, (1, 5))
    left_padded = torch.tensor([[0, 0, 1, 1, 1]])  # causal: positions 0 and 1 see only padding
    allowed = allowed_by_definition("causal", [0], left_padded.tolist(), 5)
    allowed[0, 0, 0] = allowed[0, 1, 1] = True  # ... so each attends to itself
    with torch.no_grad():
        states = model(ids, attention=CAUSAL, attention_mask=left_padded)
    assert torch.isfinite(states).all()
    torch.testing.assert_close(states, with_float_mask(model, ids, allowed), atol=1e-5, rtol=1e-5)


def test_an_explicit_mask_gives_what_the_named_patterns_give():
    model = tiny_model().eval()
    ids = torch.randint(6, 40, (2, 7))
    lower = torch.ones(7, 7, dtype=torch.bool).tril().expand(2, 7, 7)
    with torch.no_grad():
        torch.testing.assert_close(model(ids, attention=Attention.explicit(lower)), model(ids, attention=CAUSAL),
                                   atol=1e-5, rtol=1e-5)
        everything = torch.ones(2, 7, 7, dtype=torch.bool)
        torch.testing.assert_close(model(ids, attention=Attention.explicit(everything)),
                                   model(ids, attention=BIDIRECTIONAL), atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="does not fit"):
        model(ids[:, :5], attention=Attention.explicit(lower))


def test_attention_values_are_checked():
    with pytest.raises(ValueError, match="choose one of"):
        Attention("sideways")
    with pytest.raises(ValueError, match="prefix_lengths"):
        Attention("prefix")
    with pytest.raises(ValueError, match="bool mask"):
        Attention.explicit(torch.ones(2, 3, 3))
    with pytest.raises(ValueError, match="one non-negative integer length per row"):
        Attention.prefix(torch.tensor([[2], [3]]))
    with pytest.raises(ValueError, match="one non-negative integer length per row"):
        Attention.prefix([1.5, 2.0])
    with pytest.raises(ValueError, match="the batch has 2"):
        tiny_model()(torch.randint(6, 40, (2, 5)), attention=Attention.prefix([1, 2, 3]))
    assert Attention.named("causal") is CAUSAL and Attention.named("bidirectional") is BIDIRECTIONAL
    with pytest.raises(ValueError, match="cannot be named"):
        Attention.named("prefix")


@pytest.mark.parametrize("norm,positions", VARIANTS)
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


def sdpa_only(q, k, v, *, mask, is_causal, dropout):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal, dropout_p=dropout)


@pytest.mark.parametrize("kind", ["causal", "bidirectional", "prefix", "mask"])
@pytest.mark.parametrize("padded", [False, True])
def test_the_explicit_kernel_equals_sdpa_in_fp32(kind, padded):
    """models.attention.explicit_attention, which bf16 on a CPU runs, is SDPA's function: fp32 in, the same
    output and input gradients to rounding, for every pattern sdpa_arguments hands either one."""
    g = torch.Generator().manual_seed(0)
    b, h, t, hd = 3, 2, 9, 8
    q, k, v = (torch.randn(b, h, t, hd, generator=g, requires_grad=True) for _ in range(3))
    padding = torch.tensor([[1] * 9, [1] * 6 + [0] * 3, [1] * 2 + [0] * 7]) if padded else None
    pattern = {"causal": CAUSAL, "bidirectional": BIDIRECTIONAL, "prefix": Attention.prefix([0, 4, 9]),
               "mask": Attention.explicit(torch.rand(b, t, t, generator=g) < 0.5)}[kind]
    mask, is_causal = sdpa_arguments(pattern, padding, b, t, torch.device("cpu"))
    upstream = torch.randn(b, h, t, hd, generator=g)
    outputs = []
    for kernel in (sdpa_only, lambda *a, dropout, **kw: explicit_attention(*a, **kw)):
        out = kernel(q, k, v, mask=mask, is_causal=is_causal, dropout=0.0)
        grads = torch.autograd.grad(out, (q, k, v), upstream)
        outputs.append((out, *grads))
    for mine, reference in zip(outputs[1], outputs[0]):
        torch.testing.assert_close(mine, reference, rtol=1e-5, atol=1e-5)


def test_bf16_on_a_cpu_takes_the_explicit_kernel_and_fp32_or_dropout_keeps_sdpa():
    assert uses_explicit_kernel("cpu", torch.bfloat16, 128, 0.0)
    assert not uses_explicit_kernel("cpu", torch.float32, 128, 0.0)
    assert not uses_explicit_kernel("cpu", torch.bfloat16, 128, 0.1)  # SDPA's dropout stream stays the same
    assert not uses_explicit_kernel("cuda", torch.bfloat16, 128, 0.0)
    assert not uses_explicit_kernel("cpu", torch.bfloat16, EXPLICIT_KERNEL_MAX_LEN + 1, 0.0)


@pytest.mark.parametrize("attention,padded,device,dtype,length,dropout,share", [
    (CAUSAL, False, "cpu", torch.float32, 128, 0.0, 0.5),  # SDPA with is_causal skips the upper blocks
    (CAUSAL, False, "cuda", torch.bfloat16, 128, 0.1, 0.5),
    (CAUSAL, False, "cpu", torch.bfloat16, EXPLICIT_KERNEL_MAX_LEN + 1, 0.0, 0.5),  # too long: SDPA again
    (CAUSAL, True, "cpu", torch.float32, 128, 0.0, 1.0),  # a dense mask: every score
    (CAUSAL, False, "cpu", torch.float32, 128, 0.1, 1.0),  # dropout on a CPU: SDPA's math kernel
    (CAUSAL, False, "cpu", torch.bfloat16, 128, 0.0, 1.0),  # the explicit kernel
    (BIDIRECTIONAL, False, "cuda", torch.bfloat16, 128, 0.0, 1.0),
    (Attention.prefix([2]), False, "cuda", torch.bfloat16, 128, 0.0, 1.0),
])
def test_the_flops_count_halves_attention_only_where_the_chosen_kernel_skips_the_upper_triangle(
        attention, padded, device, dtype, length, dropout, share):
    padding = torch.ones(1, length, dtype=torch.long) if padded else None
    assert attention_share(attention, padding, device_type=device, dtype=dtype, length=length,
                           dropout=dropout) == share


@pytest.mark.parametrize("kind", ["causal", "bidirectional", "prefix"])
@pytest.mark.parametrize("norm,positions", [("pre", "learned"), ("post", "rope")])
def test_a_bf16_forward_and_backward_with_the_explicit_kernel_equals_sdpas_within_bf16(monkeypatch, kind, norm,
                                                                                        positions):
    """The whole backbone under bf16 autocast, padded: the explicit kernel against SDPA on the same bf16
    inputs, hidden states and every parameter's gradient, within bf16's rounding of either."""
    model = tiny_model(norm, positions, dropout=0.0).train()
    trained = [p for p in model.parameters() if p is not model.lm_bias]  # the head is not run here
    ids = torch.randint(6, 40, (3, 12), generator=torch.Generator().manual_seed(1))
    padding = torch.tensor([[1] * 12, [1] * 8 + [0] * 4, [1] * 3 + [0] * 9])
    pattern = Attention.prefix([0, 5, 12]) if kind == "prefix" else Attention.named(kind)
    probe = torch.randn(3, 12, 32, generator=torch.Generator().manual_seed(2))  # a loss no norm makes constant
    results = []
    for kernel in (sdpa_only, models.attention.attend):
        monkeypatch.setattr(models.backbone, "attend", kernel)
        model.zero_grad(set_to_none=False)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            hidden = model(ids, attention=pattern, attention_mask=padding)
        (hidden.float() * padding[..., None] * probe).sum().backward()
        results.append((hidden.detach().float()[padding.bool()], [p.grad.clone() for p in trained]))
    (sdpa_hidden, sdpa_grads), (explicit_hidden, explicit_grads) = results
    assert (explicit_hidden - sdpa_hidden).abs().max() < 0.05 * sdpa_hidden.abs().max()
    for mine, reference in zip(explicit_grads, sdpa_grads):
        assert (mine - reference).abs().max() <= 0.05 * reference.abs().max() + 1e-6


def test_a_sequence_of_padding_only_attends_to_nothing_as_sdpa_does():
    """A row whose keys are all padding ((B, 1, 1, T) mask, bidirectional): SDPA gives 0, and so does the explicit
    kernel, not the NaN of a softmax over -inf alone; the other rows are untouched."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 5, 4, generator=g, requires_grad=True) for _ in range(3))
    mask = torch.tensor([[1, 1, 1, 0, 0], [0, 0, 0, 0, 0]], dtype=torch.bool)[:, None, None, :]
    upstream = torch.randn(2, 2, 5, 4, generator=g)
    results = []
    for out in (sdpa_only(q, k, v, mask=mask, is_causal=False, dropout=0.0),
                explicit_attention(q, k, v, mask=mask, is_causal=False)):
        results.append((out, *torch.autograd.grad(out, (q, k, v), upstream)))
    assert float(results[0][0][1].detach().abs().max()) == 0.0  # SDPA's answer for the empty row
    for mine, reference in zip(results[1], results[0]):
        torch.testing.assert_close(mine, reference, rtol=1e-5, atol=1e-6)
