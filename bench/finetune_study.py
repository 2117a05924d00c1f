"""Fine-tune pretrained checkpoints on a set of tasks and print their dev scores next to the majority-class
baseline, with the wall time of every run.

    python bench/finetune_study.py outputs/study/ar outputs/study/mlm [--tasks cola sst2 mrpc rte conll2003]
        [--seed 1] [-- extra train.py overrides]

Each run is its own `python train.py task=... pretrained=...` process, exactly as a user would start it,
written to outputs/bench-finetune/<time>/<checkpoint name>/<task>. Prints a Markdown table and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from armlm.common.unapplied import SHARED_SETTINGS

REPO = Path(__file__).resolve().parents[1]
# NER's breakdown (per-type F1, precision, recall) stays in the JSON line, out of the table (as in study reports).
BREAKDOWN_PREFIXES = ("f1_", "precision", "recall")


def headline(results: dict, split: str) -> list[str]:
    """The metrics a task is reported by: its primary metric (results.json's, from the task's config) first, then
    its other metrics (MRPC: F1 then accuracy; STS-B: Pearson then Spearman)."""
    primary = results["primary_metric"]
    return [primary, *(m for m in results["metrics"][split] if m != primary and not m.startswith(BREAKDOWN_PREFIXES))]


def finetune(checkpoint: str, task: str, seed: int, extra: list[str], folder: Path) -> dict:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "train.py", f"task={task}", f"pretrained={checkpoint}", f"seed={seed}",
                           f"hydra.run.dir={folder}", "trainer.enable_progress_bar=false", *extra],
                          cwd=REPO, check=True, stdout=subprocess.PIPE, text=True,
                          env={**os.environ, SHARED_SETTINGS: "bench/finetune_study.py"})  # `extra` goes to every task
    for line in done.stdout.splitlines():  # its log stays in the run folder; what it warns of is said here
        if "[WARNING]" in line:
            print(line, file=sys.stderr)
    results = json.loads((folder / "results.json").read_text())
    results["process_seconds"] = round(time.perf_counter() - started, 1)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoints", nargs="+", help="pretraining run folders or checkpoint files")
    parser.add_argument("--tasks", nargs="+", default=["cola", "sst2", "mrpc", "rte", "conll2003"])
    parser.add_argument("--seed", type=int, default=1)
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    args, extra = parser.parse_args(argv[:split]), argv[split + 1:]  # after --: overrides for every run
    root = REPO / "outputs" / "bench-finetune" / time.strftime("%Y-%m-%d_%H-%M-%S")
    runs = {(c, t): finetune(c, t, args.seed, extra, root / Path(c).name / t)
            for c in args.checkpoints for t in args.tasks}

    names = [Path(c).name for c in args.checkpoints]
    print("| task | split | metric | majority baseline | " + " | ".join(names)
          + " | wall s (" + ", ".join(names) + ") |")
    print("|---|---|---|---|" + "---|" * len(names) + "---|")
    for task in args.tasks:
        first = runs[(args.checkpoints[0], task)]
        for split in first["metrics"]:
            for metric in headline(first, split):
                baseline = first["majority_baseline"][split][metric]
                scores = [runs[(c, task)]["metrics"][split][metric] for c in args.checkpoints]
                walls = ", ".join(str(runs[(c, task)]["process_seconds"]) for c in args.checkpoints)
                print(f"| {task} | {split} | {metric} | {fmt(baseline)} | " + " | ".join(map(fmt, scores))
                      + f" | {walls} |")
    print(json.dumps({f"{Path(c).name}/{t}": {"metrics": r["metrics"], "baseline": r["majority_baseline"],
                                               "process_seconds": r["process_seconds"], "steps": r["steps"]}
                      for (c, t), r in runs.items()}))


def fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


if __name__ == "__main__":
    main()
