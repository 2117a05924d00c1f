"""The blocked LM-head cross-entropy equals the plain F.linear + F.cross_entropy, loss and gradients."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import armlm.models.lm_loss as lm_loss
from armlm.models.lm_loss import linear_cross_entropy
from tests.helpers.lanes import fast_lane_keeps


def leaves(n: int = 300, d: int = 16, v: int = 50, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, d, generator=g, requires_grad=True)
    weight = (torch.randn(v, d, generator=g) * 0.5).requires_grad_()
    bias = (torch.randn(v, generator=g) * 0.1).requires_grad_()
    targets = torch.randint(0, v, (n,), generator=g)
    return hidden, weight, bias, targets


def grads_of(loss_fn, tensors):
    for t in tensors:
        t.grad = None
    loss = loss_fn()
    (0.37 * loss).backward()  # a non-unit upstream gradient: backward must scale what forward stored
    return loss.detach(), [t.grad.clone() for t in tensors]


@pytest.mark.parametrize("logits_per_block", [50, 50 * 7, 1 << 22])  # one row per block, ragged blocks, one block
def test_blocked_equals_plain_loss_and_gradients(monkeypatch, logits_per_block):
    monkeypatch.setattr(lm_loss, "CPU_LOGITS_PER_BLOCK", logits_per_block)
    hidden, weight, bias, targets = leaves()
    plain, plain_grads = grads_of(
        lambda: F.cross_entropy(F.linear(hidden, weight, bias), targets, reduction="sum"), (hidden, weight, bias))
    blocked, blocked_grads = grads_of(lambda: linear_cross_entropy(hidden, weight, bias, targets),
                                      (hidden, weight, bias))
    assert blocked.dtype == torch.float32
    torch.testing.assert_close(blocked, plain, rtol=1e-5, atol=1e-4)
    for mine, reference in zip(blocked_grads, plain_grads):
        torch.testing.assert_close(mine, reference, rtol=1e-5, atol=1e-6)


def test_bf16_autocast_stays_close_to_fp32():
    hidden, weight, bias, targets = leaves(n=128, d=32, v=64)
    fp32, fp32_grads = grads_of(lambda: linear_cross_entropy(hidden, weight, bias, targets), (hidden, weight, bias))

    def under_autocast():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return linear_cross_entropy(hidden, weight, bias, targets)

    bf16, bf16_grads = grads_of(under_autocast, (hidden, weight, bias))
    assert bf16.dtype == torch.float32 and all(g.dtype == torch.float32 for g in bf16_grads)
    torch.testing.assert_close(bf16, fp32, rtol=2e-2, atol=0)
    for mine, reference in zip(bf16_grads, fp32_grads):
        assert (mine - reference).abs().max() < 0.05 * reference.abs().max()


def test_no_grad_and_frozen_weights():
    hidden, weight, bias, targets = leaves()
    expected = F.cross_entropy(F.linear(hidden, weight, bias), targets, reduction="sum")
    with torch.no_grad():
        torch.testing.assert_close(linear_cross_entropy(hidden, weight, bias, targets), expected)
    # A frozen head (weights without grad) still passes the gradient on to the hidden states.
    frozen = linear_cross_entropy(hidden, weight.detach(), bias.detach(), targets)
    frozen.backward()
    reference = torch.autograd.grad(expected, hidden)[0]
    torch.testing.assert_close(hidden.grad, reference)


def test_no_rows_gives_a_zero_that_keeps_the_graph():
    hidden, weight, bias, _ = leaves()
    loss = linear_cross_entropy(hidden[:0], weight, bias, torch.zeros(0, dtype=torch.long))
    assert float(loss.detach()) == 0.0
    loss.backward()
    assert float(weight.grad.abs().sum()) == 0.0


@pytest.mark.parametrize("logits_per_block", [50 * 7, 1 << 22])
def test_row_weights_and_an_excluded_class_equal_the_plain_form(monkeypatch, logits_per_block):
    """Masked diffusion's head: each row's NLL times a constant weight, one class out of the support; the
    unweighted sum of the same rows comes back too, without a gradient."""
    monkeypatch.setattr(lm_loss, "CPU_LOGITS_PER_BLOCK", logits_per_block)
    hidden, weight, bias, targets = leaves()
    targets = torch.where(targets == 4, torch.full_like(targets, 5), targets)  # class 4 is excluded: never a target
    row_weights = torch.rand(targets.shape, generator=torch.Generator().manual_seed(1)) * 5 + 0.1

    def plain_rows():
        logits = F.linear(hidden, weight, bias)
        logits = logits.masked_fill(torch.arange(logits.shape[1]) == 4, float("-inf"))
        return F.cross_entropy(logits, targets, reduction="none")

    plain, plain_grads = grads_of(lambda: (row_weights * plain_rows()).sum(), (hidden, weight, bias))
    kept = {}

    def blocked_loss():
        total, unweighted = lm_loss.weighted_linear_cross_entropy(hidden, weight, bias, targets, row_weights,
                                                                  excluded=4)
        kept["unweighted"] = unweighted
        return total

    blocked, blocked_grads = grads_of(blocked_loss, (hidden, weight, bias))
    torch.testing.assert_close(blocked, plain, rtol=1e-5, atol=1e-4)
    for mine, reference in zip(blocked_grads, plain_grads):
        torch.testing.assert_close(mine, reference, rtol=1e-4, atol=1e-5)
    assert not kept["unweighted"].requires_grad
    torch.testing.assert_close(kept["unweighted"], plain_rows().sum().detach(), rtol=1e-5, atol=1e-4)
    assert blocked_grads[2][4] == 0  # the excluded class's bias gets no gradient


def test_under_bf16_autocast_it_equals_the_plain_form_on_the_same_bf16_logits():
    """The plain form under autocast also takes bf16 logits (F.linear) and an fp32 cross-entropy: the blocked
    head gives that loss to fp32 rounding and those gradients to bf16 rounding."""
    hidden, weight, bias, targets = leaves(n=200, d=32, v=96)

    def plain():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return F.cross_entropy(F.linear(hidden, weight, bias).float(), targets, reduction="sum")

    def blocked():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return linear_cross_entropy(hidden, weight, bias, targets)

    plain_loss, plain_grads = grads_of(plain, (hidden, weight, bias))
    blocked_loss, blocked_grads = grads_of(blocked, (hidden, weight, bias))
    torch.testing.assert_close(blocked_loss, plain_loss, rtol=1e-5, atol=1e-4)
    for mine, reference in zip(blocked_grads, plain_grads):
        assert (mine - reference).abs().max() <= 2 ** -7 * reference.abs().max()


UNDERFLOW_CASE = (torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]),
                  torch.tensor([[0.0, 0.0], [-150.0, 0.0], [0.0, 2.0]]),
                  torch.tensor([1, 2, 1]))  # rows 0 and 2: logit -150 against 0 and 2


@pytest.mark.parametrize("path", fast_lane_keeps(["eager", "compiled"], keep=["eager"]))
def test_a_target_beyond_fp32s_underflow_gets_its_exact_nll_and_gradient(path):
    """A target's probability below 1e-30 (NLL > 69 nats) is not read from the softmax, where it would be 0 and
    its NLL inf: those rows are anchored at their largest logit, exact as the plain form. Eager on a CPU takes the
    branch over the rare rows; the compiled step (one graph, aot_eager: no compiler needed) takes the branch-free
    form, with the same values."""
    h0, w0, targets = UNDERFLOW_CASE
    hidden, weight = h0.clone().requires_grad_(), w0.clone().requires_grad_()
    bias = torch.zeros(3, requires_grad=True)
    plain, plain_grads = grads_of(
        lambda: F.cross_entropy(F.linear(hidden, weight, bias), targets, reduction="sum"), (hidden, weight, bias))
    loss = linear_cross_entropy
    if path == "compiled":
        torch._dynamo.reset()
        loss = torch.compile(linear_cross_entropy, fullgraph=True, backend="aot_eager")
    blocked, blocked_grads = grads_of(lambda: loss(hidden, weight, bias, targets), (hidden, weight, bias))
    assert torch.isfinite(blocked) and float(blocked) > 2 * 69
    torch.testing.assert_close(blocked, plain)
    for mine, reference in zip(blocked_grads, plain_grads):
        torch.testing.assert_close(mine, reference)
