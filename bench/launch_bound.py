"""The study recipe's model is launch-bound on a GPU: what raises its training tokens/s, CUDA graphs in one process
(torch.compile's reduce-overhead) or several processes sharing the device (issue 83's choice for small models).

    python bench/launch_bound.py --device cuda --precision bf16 \
        --settings default:1 reduce-overhead:1 default:8 default:16 reduce-overhead:8
    python bench/launch_bound.py --dry-run      # the CPU: aot_eager, 1 and 2 processes, a few steps

The shape defaults to the findings study's (model=small, the embedded excerpt's 1,024-token vocabulary, 32 x 64
tokens). A setting `MODE:N` starts N processes at once (spawned), each building one objective's compiled training step
as bench/throughput.py does (the same model, objective, AdamW and step) and warming it up; they then wait at one
barrier, and each times --steps steps. Aggregate tokens/s is every process's tokens over the span from the first start
to the last end; per process is its own steps over its own span. Printed as a table, then one JSON line. Under
reduce-overhead the forward and backward pass are CUDA graphs and AdamW's step is not (as trainer.step.compile_mode
runs them); each row counts the steps inductor declined to graph.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import queue
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from armlm.common.machine import keep_large_allocations_on_the_heap  # noqa: E402
from bench.machine import require_device  # noqa: E402

DRY_RUN = ["--device", "cpu", "--precision", "fp32", "--compile-backend", "aot_eager", "--settings", "default:1",
           "default:2", "--steps", "2", "--warmup", "1", "--d-model", "64", "--n-layers", "2", "--n-heads", "2",
           "--d-ff", "256", "--vocab-size", "600", "--seq-len", "32", "--batch-size", "4"]


def throughput_argv(args: argparse.Namespace, mode: str) -> list[str]:
    """bench/throughput.py's options for one process of a setting: one objective, compiled in `mode`."""
    return ["--device", args.device, "--precision", args.precision, "--compile", "--compile-mode", mode,
            "--compile-backend", args.compile_backend, "--objectives", args.objective, "--only", "armlm",
            "--d-model", str(args.d_model), "--n-layers", str(args.n_layers), "--n-heads", str(args.n_heads),
            "--d-ff", str(args.d_ff), "--vocab-size", str(args.vocab_size), "--seq-len", str(args.seq_len),
            "--batch-size", str(args.batch_size), "--warmup", str(args.warmup), "--steps", str(args.steps)]


def time_one_process(argv: list[str], threads: int, timeout: float, barrier: Any, results: Any) -> None:
    """A spawned process: build the step, warm it up (compilation; CUDA graphs record on the second call), wait for
    the others, time the steps. Puts (start, end, CUDA-graph skips): a reduce-overhead step that inductor did not
    graph says so, rather than timing the default mode under another name."""
    import torch

    from bench.flops import Shape
    from bench.throughput import N_SPECIAL, armlm_contestants, parse_args
    from bench.timed_steps import timed

    keep_large_allocations_on_the_heap()  # as bench/throughput.py and train.py run
    torch.set_num_threads(threads)
    args = parse_args(argv)
    device = torch.device(args.device)
    shape = Shape(args.d_model, args.n_layers, args.n_heads, args.d_ff, args.vocab_size, args.batch_size, args.seq_len)
    torch.manual_seed(args.seed)
    batch = torch.randint(N_SPECIAL, shape.vocab_size, (shape.batch_size, shape.seq_len), device=device)
    (contestant,) = armlm_contestants(args, shape, device, batch)
    timed(contestant.train, args.warmup, device)
    barrier.wait(timeout=timeout)  # broken by the parent (abort) if a sibling fails
    started = time.monotonic()  # one clock for every process (CLOCK_MONOTONIC)
    timed(contestant.train, args.steps, device)
    ended = time.monotonic()
    results.put((started, ended, int(torch._dynamo.utils.counters["inductor"]["cudagraph_skips"])))


def aggregate(spans: list[tuple[float, float]], tokens_per_process: int) -> dict[str, float]:
    """Tokens/s of all processes together (over the first start to the last end) and of each over its own span."""
    first, last = min(s for s, _ in spans), max(e for _, e in spans)
    own = [tokens_per_process / (end - start) for start, end in spans]
    return {"aggregate_tokens_per_s": len(spans) * tokens_per_process / (last - first),
            "per_process_tokens_per_s": statistics.median(own), "per_process_min": min(own),
            "per_process_max": max(own)}


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def run_setting(args: argparse.Namespace, mode: str, processes: int, timeout: float) -> dict[str, Any]:
    """One setting's row: its processes timed together, or why they were not (a process failed, or the setting ran
    past `timeout`, compilation included); either way every process is gone when it returns."""
    context = mp.get_context("spawn")  # CUDA in each child; nothing inherited from this process
    barrier, results = context.Barrier(processes), context.Queue()
    threads = max(1, usable_cores() // processes)  # the cores shared out, none oversubscribed
    if processes > 1:  # inductor would start a pool of compile workers per process, one per core
        os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
    argv = throughput_argv(args, mode)
    workers = [context.Process(target=time_one_process, args=(argv, threads, timeout, barrier, results))
               for _ in range(processes)]
    for worker in workers:
        worker.start()
    os.environ.pop("TORCHINDUCTOR_COMPILE_THREADS", None)
    timings: list[tuple[float, float, int]] = []
    deadline, error = time.monotonic() + timeout, None
    while len(timings) < processes and error is None:
        try:
            timings.append(results.get(timeout=1))
        except queue.Empty:
            failed = [w.exitcode for w in workers if w.exitcode not in (None, 0)]
            if failed or time.monotonic() > deadline:  # its traceback is above; the next setting goes on
                error = (f"{len(timings)} of {processes} processes timed their steps "
                         + (f"(exit codes {failed})" if failed else f"within {timeout:g} s"))
    if error is not None:
        barrier.abort()  # the others stop waiting for the one that failed
        for worker in workers:
            worker.terminate()
    for worker in workers:
        worker.join(timeout=max(1.0, deadline + 10 - time.monotonic()))
        if worker.is_alive():
            worker.kill()
    if error is not None:
        return {"mode": mode, "processes": processes, "error": error}
    spans = [(start, end) for start, end, _ in timings]
    return {"mode": mode, "processes": processes, "cudagraph_skips": sum(skips for _, _, skips in timings),
            **aggregate(spans, args.steps * args.batch_size * args.seq_len)}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dry-run", action="store_true", help="the CPU at toy size: " + " ".join(DRY_RUN))
    p.add_argument("--settings", nargs="+", default=["default:1", "reduce-overhead:1", "default:4", "default:16"],
                   metavar="MODE:N", help="torch.compile mode and how many processes share the device")
    p.add_argument("--objective", default="ar", help="a configs/objective name")
    p.add_argument("--device", default="cuda")
    p.add_argument("--precision", choices=("fp32", "bf16"), default="bf16")
    p.add_argument("--compile-backend", default="inductor")
    for name, default in (("d-model", 256), ("n-layers", 4), ("n-heads", 4), ("d-ff", 1024), ("vocab-size", 1024),
                          ("batch-size", 32), ("seq-len", 64), ("warmup", 5), ("steps", 200)):
        p.add_argument(f"--{name}", type=int, default=default)
    p.add_argument("--timeout", type=float, default=120, help="seconds a setting may take, compilation included")
    p.add_argument("--json", type=Path, help="also write the JSON to this file, rewritten after each setting")
    given = sys.argv[1:] if argv is None else argv
    args = p.parse_args(given)
    if args.dry_run:
        args = p.parse_args([*DRY_RUN, *given])  # what is given after the toy settings overrides them
    for setting in args.settings:
        mode, _, count = setting.partition(":")
        if not count.isdigit() or int(count) < 1:
            p.error(f"--settings {setting}: give MODE:N, e.g. default:8 or reduce-overhead:1")
    return args


def result_of(args: argparse.Namespace, rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {"config": {k: v for k, v in vars(args).items() if k != "json"}, "rows": rows}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    require_device(args.device, "give --dry-run (the toy settings on the CPU) or --device cpu")
    rows = []
    for setting in args.settings:
        mode, _, count = setting.partition(":")
        rows.append(run_setting(args, mode, int(count), args.timeout))
        if args.json:  # rewritten after each setting: a run cut short keeps the rows it finished
            args.json.write_text(json.dumps(result_of(args, rows), default=str) + "\n")
        print(f"{setting}: {rows[-1].get('error') or format(rows[-1]['aggregate_tokens_per_s'], ',.0f') + ' tokens/s'}",
              file=sys.stderr, flush=True)
    one = next((r for r in rows if r["mode"] == "default" and r["processes"] == 1 and "error" not in r), None)
    print(f"# {args.objective}, d={args.d_model} L={args.n_layers} ff={args.d_ff} V={args.vocab_size}, "
          f"{args.batch_size} x {args.seq_len}, {args.precision} {args.device}, {args.steps} steps a process")
    print("| compile mode | processes | tokens/s, all together | per process (min-max) | x one default process "
          "| CUDA-graph skips |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        if "error" in row:
            print(f"| {row['mode']} | {row['processes']} | failed: {row['error']} | | | |")
            continue
        ratio = f"{row['aggregate_tokens_per_s'] / one['aggregate_tokens_per_s']:.2f}" if one else ""
        print(f"| {row['mode']} | {row['processes']} | {row['aggregate_tokens_per_s']:,.0f} "
              f"| {row['per_process_tokens_per_s']:,.0f} ({row['per_process_min']:,.0f}-{row['per_process_max']:,.0f}) "
              f"| {ratio} | {row['cudagraph_skips']} |")
    print(json.dumps(result_of(args, rows), default=str))
    if all("error" in row for row in rows):
        raise SystemExit("launch_bound: no setting timed its steps; see the processes' errors above")


if __name__ == "__main__":
    main()
