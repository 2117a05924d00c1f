"""Where a training step's time goes: torch.profiler over armlm's AR and MLM training steps (bench/throughput.py's
contestants, its default shape), operators grouped into matmuls and the rest, in fp32 or bf16 autocast.

    python bench/step_profile.py --precision bf16            # the question of issue 19: what is not a matmul
    python bench/step_profile.py --precision fp32 --steps 5
    python bench/step_profile.py --device cuda --compile --d-model 768 --n-layers 12 ...   # bench/gpu_lease.sh

Prints, per objective, the share of self time (CPU, or the device's on CUDA) in matmul operators (mm, addmm, bmm,
linear's kernels, scaled-dot-product attention) and the ten costliest operators, and one JSON line. Flags it does
not know go to bench/throughput.py (the shape, --compile).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bench.throughput as throughput  # noqa: E402
from bench.flops import Shape  # noqa: E402
from training.setup import keep_large_allocations_on_the_heap  # noqa: E402

MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear",
              "aten::_scaled_dot_product_flash_attention_for_cpu", "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
              "mkldnn", "aten::mkldnn_matmul")


def is_matmul(name: str) -> bool:
    return any(name.startswith(op) for op in MATMUL_OPS)


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
    device = torch.device(args.device)
    on_gpu = device.type == "cuda"
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if on_gpu else [])]
    torch.manual_seed(0)
    batch = torch.randint(throughput.N_SPECIAL, shape.vocab_size, (shape.batch_size, shape.seq_len), device=device)
    result = {"precision": args.precision, "device": args.device, "compile": bench_args.compile, "shape": asdict(shape),
              "objectives": {}}
    for contestant in throughput.armlm_contestants(bench_args, shape, device, batch):
        for _ in range(2):
            contestant.train()  # warm-up (and compilation)
        with profile(activities=activities) as prof:
            for _ in range(args.steps):
                contestant.train()
            if on_gpu:
                torch.cuda.synchronize()
        events = prof.key_averages()
        time_of = (lambda e: e.self_device_time_total) if on_gpu else (lambda e: e.self_cpu_time_total)
        total = sum(time_of(e) for e in events) or 1.0
        matmul = sum(time_of(e) for e in events if is_matmul(e.key))
        top = sorted(events, key=lambda e: -time_of(e))[:10]
        rows = [{"op": e.key, "share": time_of(e) / total, "ms_per_step": time_of(e) / 1e3 / args.steps,
                 "calls_per_step": e.count / args.steps} for e in top]
        result["objectives"][contestant.name] = {"matmul_share": matmul / total,
                                                 "ms_per_step": total / 1e3 / args.steps, "top": rows}
        clock = "device" if on_gpu else "CPU"
        print(f"## {contestant.name}, {args.precision}, {args.device}{', compiled' if bench_args.compile else ''}: "
              f"{total / 1e3 / args.steps:.1f} ms of operator self {clock} time per step, {matmul / total:.0%} in "
              "matmuls (named ATen ones; a compiled step's fused kernels count as others)")
        print("| operator | share of step | ms per step | calls per step |\n|---|---|---|---|")
        for r in rows:
            print(f"| {r['op'][:80]} | {r['share']:.1%} | {r['ms_per_step']:.2f} | {r['calls_per_step']:.0f} |")
    print(json.dumps(result, default=str))


if __name__ == "__main__":
    main()
