"""bench/step_profile.py counts each unit of a step's time once: on CUDA the kernels, not also the operators that
launched them or the annotations that span them (issue 83: 61 ms listed for a 35 ms step)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from torch.autograd import DeviceType

from bench.step_profile import is_matmul, listed_events, main


def event(key: str, device: DeviceType, cpu_us: float, device_us: float, annotation: bool = False, count: int = 1):
    return SimpleNamespace(key=key, device_type=device, self_cpu_time_total=cpu_us, self_device_time_total=device_us,
                           is_user_annotation=annotation, count=count)


# One step on CUDA: aten::mm launched a 10 us GEMM, aten::add a 5 us elementwise kernel; an annotation spans both
CUDA_STEP = [
    event("aten::mm", DeviceType.CPU, 30, 10), event("aten::add", DeviceType.CPU, 8, 5),
    event("sm90_xmma_gemm_bf16bf16", DeviceType.CUDA, 0, 10), event("elementwise_kernel", DeviceType.CUDA, 0, 5),
    event("Optimizer.step#AdamW.step", DeviceType.CUDA, 0, 15, annotation=True),
    event("ProfilerStep#1", DeviceType.CPU, 2, 15, annotation=True),
]


def test_on_cuda_each_kernel_is_counted_once():
    listed = listed_events(CUDA_STEP, on_gpu=True)
    assert [name for name, _, _ in listed] == ["sm90_xmma_gemm_bf16bf16", "elementwise_kernel"]
    assert sum(t for _, t, _ in listed) == 15  # not 15 + 15 (operators) + 15 (annotation), as before
    assert [is_matmul(name) for name, _, _ in listed] == [True, False]


def test_on_a_cpu_each_operators_self_time_is_counted_once():
    listed = listed_events(CUDA_STEP[:2] + CUDA_STEP[-1:], on_gpu=False)
    assert sum(t for _, t, _ in listed) == 38 and is_matmul("aten::mm")


@pytest.mark.slow
def test_the_cpu_profile_prints_its_listed_time_beside_the_measured_step(capsys):
    """On a CPU the profiler's own cost per operator inflates self times at this size (tiny operators), so only the
    figures' presence is checked here; on CUDA the listed kernel time is what the lease compares."""
    main(["--precision", "fp32", "--steps", "2", "--objectives", "ar", "--d-model", "64", "--n-layers", "2",
          "--n-heads", "2", "--d-ff", "256", "--vocab-size", "600", "--seq-len", "32", "--batch-size", "8"])
    out = capsys.readouterr().out
    assert "ms of CPU time listed per step against" in out
    result = json.loads(out.strip().splitlines()[-1])["objectives"]["armlm ar"]
    assert result["ms_per_step"] > 0 and result["measured_ms_per_step"] > 0
    assert sum(row["share"] for row in result["top"]) <= 1 + 1e-9  # shares of one total, nothing counted twice
