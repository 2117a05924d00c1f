"""The CPU recipe search: which pretraining settings leave every seed of every objective at least one nat
below the unigram baseline of its own validation tokens within the budget.

    python bench/recipe_search.py --setting v1024_rope --seeds 1 2 3 -- data.tokenizer.vocab_size=1024 model.positions=rope
    python bench/recipe_search.py --setting lr2e-3 --objectives mlm -- optim.lr=2e-3

(`--` ends the options: the train.py overrides follow it.)

Each run is `python train.py objective=X seed=K <overrides>` in its own process, exactly as a user starts it,
into outputs/recipe/<setting>/<objective>-seed<k>; a run whose summary.json exists is read, not rerun, so the
search resumes and grows. Prints one Markdown row per setting and objective (val/loss of every seed, the
smallest margin below the baseline, minutes per run) and appends every run as a JSON line to
outputs/recipe/runs.jsonl. The settings are fixed before any finding is measured (README, "Findings").
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROOT = REPO / "outputs" / "recipe"
MARGIN = 1.0  # nats below the unigram baseline that every seed must reach


def run(folder: Path, overrides: list[str]) -> dict:
    """One train.py process (skipped when its summary exists); its summary with the process time."""
    summary_path = folder / "summary.json"
    if not summary_path.is_file():
        started = time.perf_counter()
        resume = ["ckpt_path=last"] if (folder / "checkpoints" / "last.ckpt").is_file() else []  # interrupted
        subprocess.run([sys.executable, "train.py", f"hydra.run.dir={folder}", "trainer.enable_progress_bar=false",
                        *overrides, *resume], cwd=REPO, check=True, stdout=subprocess.DEVNULL)
        summary = json.loads(summary_path.read_text())
        summary["process_seconds"] = round(time.perf_counter() - started, 1)
        (folder / "process_seconds.txt").write_text(str(summary["process_seconds"]))
        return summary
    summary = json.loads(summary_path.read_text())
    timing = folder / "process_seconds.txt"
    summary["process_seconds"] = float(timing.read_text()) if timing.is_file() else summary["wall_seconds"]
    return summary


def row(setting: str, objective: str, runs: list[dict]) -> str:
    losses = ", ".join(f"{r['val_loss']:.3f}" for r in runs)
    margins = [r["unigram_baseline"] - r["val_loss"] for r in runs]
    minutes = sum(r["process_seconds"] for r in runs) / len(runs) / 60
    verdict = "yes" if min(margins) >= MARGIN else "no"
    return (f"| {setting} | {objective} | {runs[0]['tokens_seen']:,} | {losses} | {runs[0]['unigram_baseline']:.3f} "
            f"| {min(margins):.2f} | {verdict} | {minutes:.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--setting", required=True, help="a name for these overrides (the folder name)")
    parser.add_argument("--objectives", nargs="+", default=["ar", "mlm", "mlm_nsp"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    parser.add_argument("overrides", nargs="*", help="train.py overrides shared by every run of the setting")
    args = parser.parse_args()
    lines = ["| setting | objective | input tokens | val/loss per seed | unigram | min margin (nats) "
             f"| all >= {MARGIN:g} below | minutes per run |", "|---|---|---|---|---|---|---|---|"]
    for objective in args.objectives:
        runs = []
        for seed in args.seeds:
            folder = ROOT / args.setting / f"{objective}-seed{seed}"
            summary = run(folder, [f"objective={objective}", f"seed={seed}", *args.overrides])
            runs.append(summary)
            with (ROOT / "runs.jsonl").open("a") as out:
                out.write(json.dumps({"setting": args.setting, "overrides": args.overrides, "objective": objective,
                                      "seed": seed, **{k: summary[k] for k in (
                                          "val_loss", "unigram_baseline", "tokens_seen", "steps", "process_seconds")}})
                          + "\n")
            print(f"{args.setting} {objective} seed {seed}: val/loss {summary['val_loss']:.3f} "
                  f"(unigram {summary['unigram_baseline']:.3f}) in {summary['process_seconds']:.0f} s", flush=True)
        lines.append(row(args.setting, objective, runs))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
