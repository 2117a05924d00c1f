"""Does every objective learn through train.py on this device: each objective config (discovered, not listed), compiled
and eager, at two block sizes, one real `train.py` run each, several at once; then, optionally, a fine-tuning run
on one of those checkpoints (issue 82).

    python bench/objectives_learn.py                                  # on a GPU: trainer=gpu, model=small, 64 and 512
    python bench/objectives_learn.py --finetune conll2003 --json learn.jsonl
    python bench/objectives_learn.py --dry-run                        # on the CPU: model=tiny, 3 steps a run

A run learns when it ends at least --margin nats below its own unigram baseline (summary.json's own_below_unigram:
the unigram NLL of exactly the held-out targets its own loss scored, minus that loss), with learned: true. An objective
whose own loss is read against a baseline of its own (ELECTRA's detection loss against the binary entropy of its
replaced share: summary.json's own_baseline_kind) is held to --share of that baseline instead, the efficiency study's
registered gate. Each run
has the same input-token budget; the long blocks run a quarter of the batch, so they take half the steps. Exit status 1
when a run failed or fell short (not in a dry run, whose runs are too short to learn).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run as a script from anywhere

from omegaconf import OmegaConf  # noqa: E402

from bench.machine import require_device  # noqa: E402
from bench.objective_cases import objective_names  # noqa: E402

GPU = ["trainer=gpu", "trainer.step.loader_workers=1", "trainer.enable_progress_bar=false", "model=small",
       "trainer.val_check_interval=100000", "trainer.limit_val_batches=20", "logger=csv"]
DRY_RUN = ["trainer=gpu", "trainer.accelerator=cpu", "trainer.step.pin_memory=false",
           "trainer.step.loader_workers=0", "trainer.enable_progress_bar=false", "model=tiny", "max_tokens=null",
           "trainer.max_steps=3", "trainer.limit_val_batches=2", "logger=csv"]
# The CPU recipe as train.py runs it by default (trainer=cpu, eager, 64-token blocks, 2.2M tokens)
CPU = ["trainer.enable_progress_bar=false", "model=small", "logger=csv"]
MODES = {"compiled": ["trainer.step.compile=true"], "eager": ["trainer.step.compile=false"]}
DRY_RUN_COMPILED = ["trainer.step.compile_backend=aot_eager"]  # the CPU's stand-in for inductor (an eager run refuses it)
MARGIN = 0.5  # nats below its own unigram baseline
SHARE = 0.08  # of a baseline of the objective's own (configs/study/efficiency.yaml's gate)


def runs(objectives: list[str], blocks: list[int], batch: int, modes: list[str],
         compiled_with: list[str] | None = None) -> dict[str, list[str]]:
    """name -> the overrides of its run: every objective x mode x block size, the long blocks at batch / 4; every
    objective's run of the first block size and mode first (a run cut short by the caller's clock cuts the rest).
    `compiled_with`: settings the compiled runs add."""
    out = {}
    for block in blocks:
        rows = batch if block == blocks[0] else max(1, batch // 4)
        for mode in modes:
            for objective in objectives:
                out[f"{objective}/{mode}/{block}"] = [f"objective={objective}", f"data.block_size={block}",
                                                      f"data.batch_size={rows}", *MODES[mode],
                                                      *((compiled_with or []) if mode == "compiled" else [])]
    return out


def train_py(overrides: list[str], folder: Path, done_file: str) -> str | None:
    """`python train.py <overrides>` writing into `folder`, its output kept in folder/train.log; None when it wrote
    `done_file`, else what went wrong in one line."""
    argv = [sys.executable, str(REPO / "train.py"), *overrides, f"hydra.run.dir={folder}"]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=REPO)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.log").write_text(done.stdout + done.stderr)
    if done.returncode or not (folder / done_file).is_file():
        return f"exit status {done.returncode}: {(done.stderr.strip().splitlines() or [''])[-1][:300]}"
    return None


def train(name: str, overrides: list[str], root: Path) -> dict[str, Any]:
    folder = root / name.replace("/", "-")
    error = train_py(overrides, folder, "summary.json")
    return {"run": name, "error": error, "folder": str(folder)} if error else summary_row(name, folder)


def baseline_kind_of(folder: Path) -> str:
    """A summary written before summary.json named its own_baseline_kind: its objective class's, from the run's
    config."""
    from hydra.utils import get_class

    return get_class(OmegaConf.load(folder / ".hydra" / "config.yaml").objective._target_).own_baseline_kind


def summary_row(name: str, folder: Path) -> dict[str, Any]:
    """A finished run's row, from its summary.json."""
    s = json.loads((folder / "summary.json").read_text())
    margin, baseline = s["own_below_unigram"].get("all"), s["metrics"].get("val/own_unigram")
    return {"run": name, "folder": str(folder), "steps": s["steps"], "val_loss": s["val_loss"],
            "unigram_baseline": s["unigram_baseline"], "own_margin": margin, "own_baseline": baseline,
            "own_baseline_kind": s.get("own_baseline_kind") or baseline_kind_of(folder),
            "own_share": None if margin is None or not baseline else margin / baseline,
            "learned": s.get("learned"), "wall_seconds": s["wall_seconds"], "startup_seconds": s["startup_seconds"],
            "precision": s["precision"]}


def run_all(objectives: list[str], *, blocks: list[int], batch: int, tokens: int, modes: list[str], parallel: int,
            extra: list[str], out: Path, dry_run: bool = False, device: str = "cuda") -> list[dict[str, Any]]:
    """Every planned run's row, `parallel` at once, each printed as a table row as it ends (the token caches are
    written first, here, for every input format the objectives read, so that no two runs write one)."""
    base = bases(dry_run, device, tokens)
    planned = runs(objectives, blocks, batch, modes, DRY_RUN_COMPILED if dry_run else None)
    prepare_data([[*base, *overrides, *extra] for overrides in planned.values()])

    def one(name: str) -> dict[str, Any]:
        row = train(name, [*base, *planned[name], *extra], out)
        print(table([row], MARGIN).splitlines()[-1], flush=True)
        return row

    with concurrent.futures.ThreadPoolExecutor(parallel) as pool:
        return list(pool.map(one, planned))


def bases(dry_run: bool, device: str, tokens: int) -> list[str]:
    if dry_run:
        return DRY_RUN
    return [*(GPU if device == "cuda" else CPU), f"max_tokens={tokens}"]


def prepare_data(override_lists: list[list[str]]) -> None:
    """Each distinct data setting's token cache, written once before the runs read it."""
    from armlm.common.config import compose_config
    from armlm.training.preflight import check_config
    from armlm.training.setup import build

    done = set()
    for overrides in override_lists:
        cfg = compose_config("train", overrides)
        key = (json.dumps(OmegaConf.to_container(cfg.data, resolve=False), sort_keys=True, default=str),
               check_config(cfg)[0].input_format)
        if key not in done:
            done.add(key)
            build(cfg.data, input_format=key[1], seed=cfg.seed).setup("fit")


def finetune(task: str, pretrained: str, overrides: list[str], root: Path) -> dict[str, Any]:
    folder = root / f"finetune-{task}"
    error = train_py([f"task={task}", f"pretrained={pretrained}", *overrides], folder, "results.json")
    if error:
        return {"run": folder.name, "error": error}
    r = json.loads((folder / "results.json").read_text())
    return {"run": folder.name, "pretrained": pretrained, "metrics": r["metrics"],
            "majority_baseline": r["majority_baseline"], "steps": r["steps"], "wall_seconds": r["wall_seconds"]}


def short(row: dict[str, Any], margin: float = MARGIN, share: float = SHARE) -> bool:
    """A run that failed, did not learn, or ended less than `margin` nats below its unigram baseline (less than `share`
    of a baseline of the objective's own)."""
    if "error" in row or row["learned"] is not True or row["own_margin"] is None:
        return True
    if row["own_baseline_kind"] == "unigram":
        return row["own_margin"] < margin
    return row["own_share"] is None or row["own_share"] < share


def own_share(row: dict[str, Any]) -> str:
    return "" if row["own_baseline_kind"] == "unigram" else f" (share {number(row['own_share'])})"


def number(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def table(rows: list[dict[str, Any]], margin: float) -> str:
    lines = [f"| run | steps | val/loss | unigram | own margin (>= {margin} nats; share >= {SHARE} of its own "
             "baseline) | learned | wall s (start-up) |", "|---|---|---|---|---|---|---|"]
    for row in rows:
        if "error" in row:
            lines.append(f"| {row['run']} | failed: {row['error']} | | | | | |")
            continue
        lines.append(f"| {row['run']} | {row['steps']} | {number(row['val_loss'])} | {number(row['unigram_baseline'])} | "
                     f"{number(row['own_margin'])}{own_share(row)}{' SHORT' if short(row, margin) else ''} | "
                     f"{row['learned']} | "
                     f"{number(row['wall_seconds'], 0)} ({row['startup_seconds']}) |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--objectives", nargs="*", help="default: every config in configs/objective/")
    parser.add_argument("--blocks", type=int, nargs="+", default=[64, 512])
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    parser.add_argument("--batch", type=int, default=32, help="the short blocks' batch; the long ones run a quarter")
    parser.add_argument("--tokens", type=int, default=2_200_000, help="every run's input-token budget")
    parser.add_argument("--margin", type=float, default=MARGIN, help="nats below its own unigram baseline")
    parser.add_argument("--parallel", type=int, default=8)
    parser.add_argument("--extra", nargs="*", default=[], help="more train.py overrides for every run")
    parser.add_argument("--finetune", help="a task to fine-tune a run's checkpoint on (conll2003)")
    parser.add_argument("--finetune-from", default="mlm/compiled/64", help="that run (default: else the first run)")
    parser.add_argument("--finetune-extra", nargs="*", default=["task.data.max_train_examples=2000",
                                                                 "task.data.max_eval_examples=1000", "task.epochs=2"])
    parser.add_argument("--out", type=Path, default=Path("outputs/objectives-learn"))
    parser.add_argument("--json", type=Path, help="append every row here")
    parser.add_argument("--dry-run", action="store_true", help="on the CPU, model=tiny, 3 steps a run")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                        help="cpu: the CPU recipe (trainer=cpu; give --modes eager --blocks 64 --parallel 1)")
    args = parser.parse_args()
    if not args.dry_run:  # trainer=gpu's runs: without the device each would fail alone
        require_device(args.device, "give --dry-run, or --device cpu --modes eager --blocks 64 --parallel 1")
    if args.out.is_dir() and any(args.out.iterdir()):  # its runs start afresh, and train.py keeps a run's folder
        raise SystemExit(f"--out {args.out} holds an earlier call's runs; give an empty or new folder")
    rows = run_all(args.objectives or objective_names(), blocks=args.blocks, batch=args.batch, tokens=args.tokens,
                   modes=args.modes, parallel=args.parallel, extra=args.extra, out=args.out, dry_run=args.dry_run,
                   device=args.device)
    base = bases(args.dry_run, args.device, args.tokens)
    print(f"every objective through train.py ({' '.join(base)} {' '.join(args.extra)})")
    print(table(rows, args.margin))
    if args.finetune:
        finished = [row for row in rows if "error" not in row]
        source = next((row for row in finished if row["run"] == args.finetune_from), finished[0] if finished else None)
        trainer = ["trainer=gpu", *(["trainer.accelerator=cpu"] if args.dry_run else [])] if (
            args.device == "cuda") else []
        tuned = (finetune(args.finetune, source["folder"], [*trainer, "trainer.enable_progress_bar=false",
                                                            *args.finetune_extra], args.out)
                 if source else {"run": f"finetune-{args.finetune}", "error": "no pretraining run to fine-tune"})
        print(f"fine-tuned {tuned.get('pretrained', '-')} on {args.finetune}: "
              f"{tuned.get('metrics', tuned.get('error'))}; majority baseline {tuned.get('majority_baseline')}")
        rows.append(tuned)
    if args.json:
        with args.json.open("a") as file:
            file.writelines(json.dumps(row) + "\n" for row in rows)
    fell_short = [row["run"] for row in rows if ("learned" in row or "error" in row) and short(row, args.margin)]
    if fell_short and not args.dry_run:
        print(f"did not learn to {args.margin} nats below its own baseline: {', '.join(fell_short)}")
        sys.exit(1)


if __name__ == "__main__":
    main()
