"""Where a training step's time goes: torch.profiler over armlm's AR and MLM training steps (bench/throughput.py's
contestants, its default shape), operators grouped into matmuls and the rest, in fp32 or bf16 autocast.

    python bench/step_profile.py --precision bf16            # the question of issue 19: what is not a matmul
    python bench/step_profile.py --precision fp32 --steps 5
    python bench/step_profile.py --device cuda --compile --d-model 768 --n-layers 12 ...   # bench/gpu_lease.sh

Prints, per objective, the share of self time (CPU, or the device's on CUDA) in matmul operators (mm, addmm, bmm,
linear's kernels, scaled-dot-product attention) and the ten costliest operators, and one JSON line. Flags it does
not know go to bench/throughput.py (the shape, --compile).

Each unit of time is counted once (`listed_events`): on a CPU every operator's self time; on CUDA the device's own
events (kernels, copies, sets), never also the CPU-side operator that launched them, whose device time is the same
kernels' again, nor a user annotation that spans them. The listed time per step is printed beside the step's time
measured without the profiler (synchronised, the same number of steps): on a device that never idles they agree, and
a listed time well below the measured one is the launch-bound share.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bench.throughput as throughput  # noqa: E402
from armlm.common.machine import keep_large_allocations_on_the_heap  # noqa: E402
from bench.flops import Shape  # noqa: E402
from bench.machine import require_device  # noqa: E402
from bench.timed_steps import timed  # noqa: E402

MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear",
              "aten::_scaled_dot_product_flash_attention_for_cpu", "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
              "mkldnn", "aten::mkldnn_matmul")


# What CUDA's matmul and attention kernels are named (cuBLAS, CUTLASS, cuDNN, flash, memory-efficient attention)
MATMUL_KERNELS = ("gemm", "nvjet", "cutlass", "wgmma", "xmma", "flash", "fmha", "sdpa")


def is_matmul(name: str) -> bool:
    return any(name.startswith(op) for op in MATMUL_OPS) or any(k in name.lower() for k in MATMUL_KERNELS)


def listed_events(events: list[Any], on_gpu: bool) -> list[tuple[str, float, int]]:
    """(name, self time in microseconds, calls) of what the step's time is made of, each unit of time once: the
    device's own events on CUDA, the operators' self CPU time on a CPU; user annotations left out on both."""
    if on_gpu:
        return [(e.key, e.self_device_time_total, e.count) for e in events
                if e.device_type == DeviceType.CUDA and not e.is_user_annotation]
    return [(e.key, e.self_cpu_time_total, e.count) for e in events if not e.is_user_annotation]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="bf16")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--objectives", nargs="*", default=["ar", "mlm"])
    parser.add_argument("--device", default="cpu", help="cuda: the operators' device time")
    # anything else is bench/throughput.py's (its shape flags, --compile)
    args, shape_flags = parser.parse_known_args(argv)
    keep_large_allocations_on_the_heap()  # as train.py and bench/throughput.py run: no page faults per step
    bench_args = throughput.parse_args(["--precision", args.precision, "--device", args.device, "--objectives",
                                        *args.objectives, *shape_flags])
    shape = Shape(bench_args.d_model, bench_args.n_layers, bench_args.n_heads, bench_args.d_ff, bench_args.vocab_size,
                  bench_args.batch_size, bench_args.seq_len)
    device = require_device(args.device, "give --device cpu")
    on_gpu = device.type == "cuda"
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if on_gpu else [])]
    torch.manual_seed(0)
    batch = torch.randint(throughput.N_SPECIAL, shape.vocab_size, (shape.batch_size, shape.seq_len), device=device)
    result = {"precision": args.precision, "device": args.device, "compile": bench_args.compile, "shape": asdict(shape),
              "objectives": {}}
    for contestant in throughput.armlm_contestants(bench_args, shape, device, batch):
        for _ in range(2):
            contestant.train()  # warm-up (and compilation)
        measured_ms = timed(contestant.train, args.steps, device) * 1e3 / args.steps
        with profile(activities=activities) as prof:
            for _ in range(args.steps):
                contestant.train()
            if on_gpu:
                torch.cuda.synchronize()
        listed = listed_events(prof.key_averages(), on_gpu)
        total = sum(t for _, t, _ in listed) or 1.0
        matmul = sum(t for name, t, _ in listed if is_matmul(name))
        top = sorted(listed, key=lambda e: -e[1])[:10]
        rows = [{"op": name, "share": t / total, "ms_per_step": t / 1e3 / args.steps, "calls_per_step": n / args.steps}
                for name, t, n in top]
        listed_ms = total / 1e3 / args.steps
        result["objectives"][contestant.name] = {"matmul_share": matmul / total, "ms_per_step": listed_ms,
                                                 "measured_ms_per_step": measured_ms, "top": rows}
        clock = "device" if on_gpu else "CPU"
        print(f"## {contestant.name}, {args.precision}, {args.device}{', compiled' if bench_args.compile else ''}: "
              f"{listed_ms:.1f} ms of {clock} time listed per step against {measured_ms:.1f} ms measured "
              f"({listed_ms / measured_ms:.0%}), {matmul / total:.0%} in matmuls (named ATen ones and their kernels; "
              "a compiled step's fused kernels count as others)")
        print("| operator | share of step | ms per step | calls per step |\n|---|---|---|---|")
        for r in rows:
            print(f"| {r['op'][:80]} | {r['share']:.1%} | {r['ms_per_step']:.2f} | {r['calls_per_step']:.0f} |")
    print(json.dumps(result, default=str))


if __name__ == "__main__":
    main()
