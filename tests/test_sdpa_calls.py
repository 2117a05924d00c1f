"""Every objective's attention calls keep the fastest kernel eligible (bench/sdpa_calls.py spies on them): causal
passes get is_causal=True and no mask, bidirectional passes without padding or documents get no mask, and only
prefix, two-stream (explicit), document and padding patterns carry a mask tensor, never beside is_causal. The
objectives are discovered from configs/objective/, never listed."""

from __future__ import annotations

import pytest
import torch

from armlm.models.attention import STATIC_KINDS, attend
from bench.objective_cases import objective_case, objective_names
from bench.sdpa_calls import SdpaCall, expected_arguments, recorded_calls

OBJECTIVES = objective_names()


def calls_of(name: str, *, documents: bool) -> list[SdpaCall] | None:
    case = objective_case(name, documents=documents)
    if case is None:
        return None
    with recorded_calls() as calls:
        case.objective.loss(case.batch, case.model, torch.Generator().manual_seed(0))
    return calls


@pytest.mark.parametrize("name", OBJECTIVES)
def test_each_call_gets_what_keeps_its_fastest_kernel(name):
    calls = calls_of(name, documents=False)
    case = objective_case(name)
    declared = case.objective.pretraining_attention
    assert calls
    for call in calls:
        assert (call.mask is not None, call.is_causal) == expected_arguments(call), call
    blocks = case.objective.input_format == "blocks"
    if declared in STATIC_KINDS and blocks:  # AR, MLM, masked diffusion, ELECTRA...: no mask tensor at all
        assert all(call.mask is None for call in calls)
    if blocks and all(call.kind == "causal" for call in calls):  # AR and the causal phases: the causal kernels
        assert all(call.is_causal for call in calls)
    if declared not in STATIC_KINDS:  # a prefix LM's prefixes, XLNet's two streams
        assert all(call.mask is not None and not call.is_causal for call in calls)


@pytest.mark.parametrize("name", OBJECTIVES)
def test_documents_kept_apart_always_carry_a_mask(name):
    calls = calls_of(name, documents=True)
    if calls is None:  # segment pairs join two documents on purpose and refuse the setting
        assert objective_case(name).objective.input_format != "blocks"
        return
    assert calls and all(call.documents and call.mask is not None and not call.is_causal for call in calls)


def test_the_spy_sees_a_mask_it_was_not_meant_to_get():
    """The expectation can fail: a bidirectional pass handed a mask of all True is caught."""
    q = torch.randn(1, 2, 4, 8)
    with recorded_calls() as calls:
        from armlm.models import attention
        attention.sdpa_arguments(attention.BIDIRECTIONAL, None, 1, 4, q.device)
        attend(q, q, q, mask=torch.ones(1, 1, 4, 4, dtype=torch.bool), is_causal=False, dropout=0.0)
    assert len(calls) == 1 and (calls[0].mask is not None, calls[0].is_causal) != expected_arguments(calls[0])


def test_the_kernels_a_call_can_use_follow_mask_dtype_and_head_size():
    free = SdpaCall("causal", False, False, None, True, 64)
    masked = SdpaCall("prefix", False, False, (2, 1, 8, 8), False, 64)
    assert free.kernels(torch.bfloat16) == ("flash", "efficient", "math")
    assert free.kernels(torch.float32) == ("efficient", "math")  # flash runs in half precision only
    assert masked.kernels(torch.bfloat16) == ("efficient", "math")
    assert SdpaCall("causal", False, False, None, True, 320).kernels(torch.bfloat16) == ("efficient", "math")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch says which kernel a call can use on CUDA only")
def test_flash_eligibility_agrees_with_torch_on_cuda():
    from torch.backends.cuda import SDPAParams, can_use_flash_attention

    q = torch.randn(2, 4, 64, 64, device="cuda", dtype=torch.bfloat16)
    for mask, causal in ((None, True), (None, False), (torch.ones(2, 1, 64, 64, device="cuda", dtype=torch.bool), False)):
        call = SdpaCall("causal" if causal else "mask", False, False, None if mask is None else tuple(mask.shape),
                        causal, 64)
        params = SDPAParams(q, q, q, mask, 0.0, causal, False)
        assert can_use_flash_attention(params, False) == ("flash" in call.kernels(torch.bfloat16))
