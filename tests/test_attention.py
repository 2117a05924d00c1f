"""models/attention.py: every pattern (with padding) against its definition, prefix and explicit masks, the
explicit kernel against SDPA in fp32 and bf16, and the attention FLOPs its kernels skip."""

import pytest
import torch
import torch.nn.functional as F

from armlm.models import attention as attention_module
from armlm.models import backbone as backbone_module
from armlm.models.attention import (
    BIDIRECTIONAL,
    CAUSAL,
    EXPLICIT_KERNEL_MAX_LEN,
    Attention,
    attention_share,
    explicit_attention,
    sdpa_arguments,
    uses_explicit_kernel,
)
from armlm.models.backbone import Transformer
from tests.helpers.lanes import fast_lane_keeps
from tests.helpers.models import tiny_model


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


@pytest.mark.parametrize("norm,positions,kind", fast_lane_keeps(
    [(norm, positions, kind) for norm, positions in [("pre", "learned"), ("post", "rope")]
     for kind in ["causal", "bidirectional", "prefix"]], keep=[("post", "rope", "prefix")]))
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
    for kernel in (sdpa_only, attention_module.attend):
        monkeypatch.setattr(backbone_module, "attend", kernel)
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
