"""The whole pretraining loop against the bare training step: how much of the step's speed does train.py keep?

    python bench/loop.py                          # ar and mlm, 150 steps of 32 x 128, fp32, 3 repeats
    python bench/loop.py --precision bf16         # train.py's default on CPUs with bf16 units
    python bench/loop.py --steps 300 -- data=brown

Each repeat runs, per objective, a real `python train.py` (Lightning, logging every 10 steps, validation and
checkpoints every 100 steps and at the end) and reads its tokens/s over `trainer.fit` from summary.json
(fit_seconds: no data preparation or process start-up). Right before and after it, this process times the bare
step of bench/throughput.py (forward, backward, AdamW) at the same shape, precision and vocabulary. Never in parallel:
two jobs on these cores would measure each other. Prints a table (median over repeats, min-max) and one JSON
line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bench.throughput as throughput  # noqa: E402
from armlm.common.machine import keep_large_allocations_on_the_heap  # noqa: E402
from armlm.models.checkpoint import read_hyperparameters  # noqa: E402
from bench.flops import Shape  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def loop_run(objective: str, args: argparse.Namespace, folder: Path) -> dict:
    precision = "32-true" if args.precision == "fp32" else "bf16-mixed"
    subprocess.run(
        [sys.executable, "train.py", f"objective={objective}", f"hydra.run.dir={folder}",
         f"data.block_size={args.block_size}", f"data.batch_size={args.batch_size}", f"trainer.precision={precision}",
         f"max_tokens={args.steps * args.block_size * args.batch_size}", "trainer.enable_progress_bar=false",
         *args.overrides],
        cwd=REPO, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    summary = json.loads((folder / "summary.json").read_text())
    saved = read_hyperparameters(Path(summary["last_checkpoint"]))
    return {"tokens_per_s": summary["tokens_seen"] / summary["fit_seconds"], "steps": summary["steps"],
            "model": saved["model"]}


def bare_step(objective: str, model: dict, args: argparse.Namespace) -> float:
    """Median tokens/s of the benchmark's training step for the run's model and shape."""
    shape = Shape(model["d_model"], model["n_layers"], model["n_heads"], model["d_ff"], model["vocab_size"],
                  args.batch_size, args.block_size)
    bench_args = throughput.parse_args(["--precision", args.precision, "--dropout", str(model["dropout"]),
                                        "--objectives", objective])
    batch = torch.randint(throughput.N_SPECIAL, shape.vocab_size, (shape.batch_size, shape.seq_len))
    contestant = next(c for c in throughput.armlm_contestants(bench_args, shape, torch.device("cpu"), batch)
                      if c.name == f"armlm {objective}")
    throughput.timed(contestant.train, 2, torch.device("cpu"))  # warm-up
    seconds = [throughput.timed(contestant.train, 1, torch.device("cpu")) for _ in range(args.bare_steps)]
    return shape.tokens / statistics.median(seconds)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("overrides", nargs="*", help="extra train.py overrides (after --)")
    p.add_argument("--objectives", nargs="+", default=["ar", "mlm"])
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--bare-steps", type=int, default=7)
    p.add_argument("--block-size", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    args = p.parse_args(argv)
    keep_large_allocations_on_the_heap()  # the bare step runs as train.py would run it
    shares: dict[str, list[dict]] = {o: [] for o in args.objectives}
    models: dict[str, dict] = {}  # each objective's model settings, known after its first run
    with tempfile.TemporaryDirectory() as root:
        for repeat in range(args.repeats):
            for objective in args.objectives:
                # The bare step is timed right before (once the model is known) and right after each run, so
                # a neighbour's load that changes during the run weighs on both sides.
                bare = [bare_step(objective, models[objective], args)] if objective in models else []
                run = loop_run(objective, args, Path(root) / f"{objective}-{repeat}")
                models[objective] = run["model"]
                bare.append(bare_step(objective, run["model"], args))
                shares[objective].append({"loop": run["tokens_per_s"], "bare": statistics.mean(bare),
                                          "share": run["tokens_per_s"] / statistics.mean(bare),
                                          "steps": run["steps"]})
    result = {"config": {k: v for k, v in vars(args).items()}, "runs": shares}
    print(f"# train.py loop vs bare step: {args.steps} steps of {args.batch_size} x {args.block_size}, "
          f"{args.precision}, median of {args.repeats} repeats (min-max)")
    print("| objective | loop tokens/s | bare step tokens/s | loop / bare |")
    print("|---|---|---|---|")
    for objective, runs in shares.items():
        cells = []
        for key in ("loop", "bare", "share"):
            values = [r[key] for r in runs]
            fmt = "{:.0%}" if key == "share" else "{:,.0f}"
            cells.append(f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}-"
                         f"{fmt.format(max(values))})")
        print(f"| {objective} | " + " | ".join(cells) + " |")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
