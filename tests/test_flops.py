"""models.flops against torch.utils.flop_counter, which counts the matmuls the real model dispatches."""

from __future__ import annotations

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from armlm.models.attention import BIDIRECTIONAL, CAUSAL, Attention
from armlm.models.backbone import ModelConfig, Transformer
from armlm.models.flops import forward_flops, linear_flops
from armlm.models.heads import ClassificationHead
from tests.helpers.objectives import skipped_causal_half


def counted(fn) -> float:
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        fn()
    return float(counter.get_total_flops())


@pytest.fixture
def model() -> Transformer:
    torch.manual_seed(0)
    return Transformer(ModelConfig(vocab_size=50, max_len=16, d_model=32, n_layers=3, n_heads=4, d_ff=48)).eval()


@pytest.mark.parametrize("attention", [CAUSAL, BIDIRECTIONAL, Attention.prefix([3, 5])], ids=["causal", "bi", "prefix"])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("sparse_output", [False, True])
def test_backbone_and_head_flops_match_the_counter(model, attention, padded, sparse_output):
    ids = torch.randint(5, 50, (2, 12))
    mask = torch.ones_like(ids)
    if padded:
        mask[1, 9:] = 0
    mask = mask if padded else None
    output_mask = (torch.rand(2, 12, generator=torch.Generator().manual_seed(1)) < 0.3) if sparse_output else None
    rows = int(output_mask.sum()) if sparse_output else 24
    vocab_rows = rows - 1  # the head may score fewer rows than the backbone returns (AR's last position)

    def run():
        states = model(ids, attention=attention, attention_mask=mask, output_mask=output_mask)
        model.lm_nll(states.reshape(-1, 32)[:vocab_rows], torch.randint(5, 50, (vocab_rows,)))

    ours = model.forward_flops(ids, attention, attention_mask=mask, output_rows=rows, vocab_rows=vocab_rows)
    assert counted(run) == pytest.approx(ours + skipped_causal_half(model.config, ids, attention, mask), rel=1e-12)


def test_the_sparse_output_saves_exactly_the_last_mlp_on_the_other_rows():
    shape = dict(d_model=8, n_layers=2, d_ff=16, vocab_size=10, sequences=1, length=4, vocab_rows=0,
                 attention_share=1.0)
    full, sparse = forward_flops(output_rows=4, **shape), forward_flops(output_rows=1, **shape)
    assert full - sparse == 3 * 2 * 2 * 8 * 16  # 3 rows x 2 FLOPs x the MLP's two 8 x 16 matrices
    with pytest.raises(ValueError, match="output_rows=5"):
        forward_flops(output_rows=5, **shape)


def test_a_small_head_is_counted_by_its_linear_layers():
    head = ClassificationHead(32, 2)
    x = torch.randn(5, 32)
    assert counted(lambda: head(x)) == linear_flops(head, 5) == 2 * 5 * (32 * 32 + 32 * 2)


def test_causal_attention_with_dropout_on_a_cpu_is_counted_whole():
    """SDPA leaves its block-skipping kernel for the math one when attention dropout is on (CPU), which computes
    every score: the count then takes the full T x T, as the flop counter does."""
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=50, max_len=16, d_model=32, n_layers=2, n_heads=4, d_ff=48,
                                    dropout=0.1)).train()
    ids = torch.randint(5, 50, (2, 12))
    ours = model.forward_flops(ids, CAUSAL)
    assert counted(lambda: model(ids, attention=CAUSAL)) == pytest.approx(ours, rel=1e-12)
    assert model.eval().forward_flops(ids, CAUSAL) < ours  # evaluation: no dropout, the fast kernel


def test_causal_attention_in_bf16_on_a_cpu_is_counted_whole(model):
    """In bf16 on a CPU the backbone attends with models.attention's explicit kernel, which computes every
    score: under autocast the count takes the full T x T, and the flop counter sees exactly that many."""
    ids = torch.randint(5, 50, (2, 12))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ours = model.forward_flops(ids, CAUSAL)
        seen = counted(lambda: model(ids, attention=CAUSAL))
    assert seen == pytest.approx(ours, rel=1e-12)
    assert model.forward_flops(ids, CAUSAL) < ours  # fp32: SDPA's kernel skips the upper triangle
