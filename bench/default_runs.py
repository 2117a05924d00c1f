"""Run the default pretraining run of every objective config (`python train.py objective=X`) and print its figures.

    python bench/default_runs.py [extra overrides...]

Prints a Markdown table (wall time, steps, tokens, final val/loss and val/ppl next to the unigram baseline)
and one JSON line. Each run is a separate process, exactly as a user would start it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OBJECTIVES = tuple(sorted(path.stem for path in (REPO / "configs" / "objective").glob("*.yaml")))


def run(objective: str, extra: list[str], root: Path) -> dict:
    folder = root / objective
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "train.py", f"objective={objective}", f"hydra.run.dir={folder}",
         "trainer.enable_progress_bar=false", *extra],
        cwd=REPO, check=True, stdout=subprocess.DEVNULL,
    )
    summary = json.loads((folder / "summary.json").read_text())
    summary["process_seconds"] = round(time.perf_counter() - started, 1)
    return summary


def main() -> None:
    extra = sys.argv[1:]
    root = REPO / "outputs" / "bench-default" / time.strftime("%Y-%m-%d_%H-%M-%S")
    rows = {objective: run(objective, extra, root) for objective in OBJECTIVES}
    print("| objective | wall s (process) | steps | input tokens | predicted tokens | val/loss | val/ppl "
          "| unigram baseline | below baseline by |")
    print("|---|---|---|---|---|---|---|---|---|")
    for objective, s in rows.items():
        print(f"| {objective} | {s['process_seconds']} | {s['steps']} | {s['tokens_seen']:,} | "
              f"{s['pred_tokens_seen']:,} | {s['val_loss']:.3f} | {s['val_ppl']:.1f} | "
              f"{s['unigram_baseline']:.3f} | {s['unigram_baseline'] - s['val_loss']:.3f} nats |")
    print(json.dumps({o: {k: s[k] for k in ("process_seconds", "steps", "tokens_seen", "val_loss", "val_ppl",
                                             "unigram_baseline")} for o, s in rows.items()}))


if __name__ == "__main__":
    main()
