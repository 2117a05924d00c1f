"""The pilot ladder of a FLOPs-budgeted study (study=efficiency): each arm's pretraining stage, exactly as the study
runs it, at several multiples of a base budget, on a seed no registered run uses (20 by default), several at once,
each under a wall-clock limit; then read from their TensorBoard logs (bench/pilot_ladder.py). Printed per run: steps
logged, seconds a step (validation included), each arm's held-out own loss as a share below its context-free baseline
(the study gate's quantity: `own_share_below_unigram`) at its last validation, the first step at which it reached the
gate, and whether the finished run clears its arm's bar. A run stopped at its wall limit keeps its trajectory and
clears nothing.

Then the budget rule fixed before the ladder ran (docs/findings.md): over every run under `--root`, from this call or
an earlier one, and every run in `--earlier` JSON files whose logs are gone, the smallest of `--rungs` at which every
arm of the study has a finished run that clears its bar (`--bar arm=share`, the gate for the others). A rung where a
finished run misses its bar is passed over; the first one still missing a run, or holding an unfinished one, leaves
the choice open, naming what it waits for.

    python bench/efficiency_pilot.py --root /tmp/pilot --runs electra:16 all_tokens_mlm:16 --parallel 2 \
        --wall 600 --extra-pretrain trainer=gpu --out /tmp/pilot.json
    python bench/efficiency_pilot.py --root /tmp/pilot --plot ladder.png  # read the ladder so far, apply the rule
    python bench/efficiency_pilot.py --root /tmp/new --earlier a.json b.json  # logs gone: what --out wrote of them

Several runs share one GPU as separate processes; the first starts alone until its token cache is written, so the
others read that cache instead of building it each.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from armlm.common.atomic import atomic_file  # noqa: E402
from bench.pilot_ladder import Pilot, chosen_multiple, ladder_figure, pilots_recorded, pilots_under, read, table  # noqa: E402

REPLICATION_SEEDS = {6, 7, 8}  # kept for an independent replication: never run


def parse_arm(spec: str, separator: str, option: str, number: str, example: str) -> tuple[str, float]:
    """`arm<separator><number>` from the command line (--runs electra:2, --bar electra=0.10), or a one-line error."""
    arm, _, value = spec.partition(separator)
    try:
        return arm, float(value)
    except ValueError:
        raise SystemExit(f"{option} takes arm{separator}{number} (e.g. {example}), got {spec!r}") from None


def pilot_of(args: argparse.Namespace, arm: str, multiple: float) -> Pilot:
    """The run of `arm` at `multiple` x the base budget: the study's own pretraining stage, its budget set as the
    study's (study.budget), so a study that registered its budget still runs its pilot rungs."""
    root = args.root / f"x{multiple:g}-{arm}"
    extra = json.dumps(list(args.extra_pretrain))
    command = [sys.executable, "-m", "armlm", "study", f"study={args.study}", f"scale={args.scale}",
               f"++study.budget={args.base_budget * multiple:.6g}", f"first_seed={args.seed}", "seeds=1", f"arm={arm}",
               "stages=[pretrain]", f"root={root}", "report=false", f"extra_pretrain={extra}"]
    return Pilot(arm, multiple, root, command)


def cache_written(root: Path) -> bool:
    """A run has begun training (its TensorBoard folder exists), so its token cache is complete."""
    return any(root.glob("**/tensorboard/**/events.out.tfevents.*"))


def run_all(pilots: list[Pilot], parallel: int, wall: float, log_dir: Path) -> None:
    waiting, running = list(pilots), {}
    first = True
    while waiting or running:
        while waiting and len(running) < parallel and not (first and running):
            pilot = waiting.pop(0)
            log = open(log_dir / f"{pilot.root.name}.log", "w")  # noqa: SIM115 (closed when the run ends)
            process = subprocess.Popen(pilot.command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                       start_new_session=True)
            running[pilot.root.name] = (pilot, process, log, time.monotonic())
            print(f"started {pilot.root.name}: {' '.join(pilot.command[1:])}", flush=True)
        time.sleep(2)
        if first and running and any(cache_written(p.root) or proc.poll() is not None
                                     for p, proc, _, _ in running.values()):
            first = False
        for name, (pilot, process, log, started) in list(running.items()):
            elapsed = time.monotonic() - started
            if process.poll() is None and elapsed < wall:
                continue
            if process.poll() is None:
                pilot.stopped_at_wall = True
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
            log.close()
            pilot.wall_seconds = round(elapsed, 1)
            del running[name]
            print(f"ended {name} after {elapsed:.0f} s (rc={process.returncode}"
                  f"{', stopped at the wall limit' if pilot.stopped_at_wall else ''})", flush=True)


def study_arms(study: str) -> list[str]:
    from omegaconf import OmegaConf

    path = REPO / "configs" / "study" / f"{study}.yaml"
    if not path.is_file():
        raise SystemExit(f"no study config {path}; pass --study with a name in configs/study/")
    return list(OmegaConf.load(path).arms)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, required=True, help="where the pilot runs are written")
    parser.add_argument("--runs", nargs="*", default=[], help="arm:multiple of the base budget to run, e.g. electra:2 "
                        "(none: only read the runs already under --root)")
    parser.add_argument("--study", default="efficiency")
    parser.add_argument("--scale", default="gutenwiki")
    parser.add_argument("--base-budget", type=float, default=2.93e14, help="training FLOPs of one multiple "
                        "(gutenwiki: one MLM pass)")
    parser.add_argument("--seed", type=int, default=20)
    parser.add_argument("--gate", type=float, default=0.08, help="the study gate's own_share_below_unigram")
    parser.add_argument("--bar", nargs="*", default=["electra=0.10", "all_tokens_mlm=0.10"],
                        help="arm=share an arm must reach instead of the gate (default: the rule in docs/findings.md)")
    parser.add_argument("--rungs", type=float, nargs="+", default=[1.0, 2.0, 4.0],
                        help="the multiples the rule chooses among, smallest first (default: the rule's rungs)")
    parser.add_argument("--parallel", type=int, default=1, help="runs at once")
    parser.add_argument("--wall", type=float, default=float("inf"), help="seconds a run may take before it is stopped")
    parser.add_argument("--extra-pretrain", nargs="*", default=[], help="more settings for every pretraining stage")
    parser.add_argument("--earlier", type=Path, nargs="*", default=[], help="JSON files an earlier call wrote with "
                        "--out: their runs count as read then, unless --root holds the same run with something logged")
    parser.add_argument("--out", type=Path, default=None, help="write every run's figures here as JSON")
    parser.add_argument("--plot", type=Path, default=None, help="draw every run's shares against its steps here (PNG)")
    args = parser.parse_args(argv)
    if args.seed in REPLICATION_SEEDS:
        raise SystemExit(f"seed {args.seed} is kept for an independent replication; pilot on another (e.g. 20)")
    if args.parallel < 1:
        raise SystemExit(f"--parallel must be at least 1, got {args.parallel}")
    arms = study_arms(args.study)
    bars = dict(parse_arm(spec, "=", "--bar", "share", "electra=0.10") for spec in args.bar)
    if unknown := sorted(set(bars) - set(arms)):
        raise SystemExit(f"--bar names {unknown}, not arms of study={args.study} ({', '.join(arms)})")
    recorded = pilots_recorded(args.earlier, args)  # a bad file is refused before any run, not hours after
    args.root.mkdir(parents=True, exist_ok=True)
    launched = [pilot_of(args, *parse_arm(spec, ":", "--runs", "multiple", "electra:16")) for spec in args.runs]
    run_all(launched, args.parallel, args.wall, args.root)
    logged = launched + [p for p in pilots_under(args.root) if p.root not in {q.root for q in launched}]
    for pilot in logged:
        read(pilot)
    # A folder that logged nothing (a launch that failed at once) does not hide the run a file recorded.
    logged = [p for p in logged if p.finished or p.steps or p.shares or any(p is q for q in launched)]
    pilots = sorted(logged + [p for p in recorded if (p.multiple, p.arm) not in {(q.multiple, q.arm) for q in logged}],
                    key=lambda p: (p.multiple, p.arm))
    multiple, reason = chosen_multiple(pilots, arms, bars, args.gate, args.rungs)
    print(f"seed {args.seed}, {args.study} at {args.scale}, base budget {args.base_budget:.3g} FLOPs, gate "
          f"{args.gate:g}, bars {bars}")
    print(table(pilots, bars, args.gate))
    print(f"budget: {'none yet' if multiple is None else f'{multiple:g} x = {args.base_budget * multiple:.3g} FLOPs'}"
          f" ({reason})")
    if args.plot is not None:
        import matplotlib

        matplotlib.use("Agg")  # a file, never a window
        import matplotlib.pyplot as plt

        fig = ladder_figure(pilots, bars, args.gate)
        args.plot.parent.mkdir(parents=True, exist_ok=True)
        with atomic_file(args.plot, "wb") as f:
            fig.savefig(f, format="png", dpi=120)
        plt.close(fig)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        records = [{**asdict(p), "root": str(p.root), "bar": bars.get(p.arm, args.gate),
                    "first_step_at_bar": p.first_step_at(bars.get(p.arm, args.gate)),
                    "clears": p.clears(bars.get(p.arm, args.gate))} for p in pilots]
        args.out.write_text(json.dumps({"seed": args.seed, "study": args.study, "scale": args.scale,
                                        "base_budget": args.base_budget, "gate": args.gate, "bars": bars,
                                        "chosen_multiple": multiple, "rule": reason, "runs": records}, indent=1))


if __name__ == "__main__":
    main()
