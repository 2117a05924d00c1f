"""A pilot ladder's runs and the rule over them (bench/efficiency_pilot.py runs them): each run's steps, pace and
held-out own-loss shares below its context-free baseline, read from its TensorBoard logs or, where the logs are gone,
from the JSON an earlier reading wrote; the budget rule fixed before the ladder ran (docs/findings.md); its table and
its figure."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from armlm.common.scalars import loaded_events, scalar_frame

if TYPE_CHECKING:
    from matplotlib.figure import Figure


@dataclass
class Pilot:
    arm: str
    multiple: float
    root: Path
    command: list[str] = field(default_factory=list)  # empty for a run read from an earlier call
    wall_seconds: float | None = None
    stopped_at_wall: bool = False
    finished: bool = False
    steps: int = 0
    seconds_per_step: float | None = None
    shares: dict[int, float] = field(default_factory=dict)  # validation step -> own loss below baseline, a share
    # The finished run's trainer precision (its summary.json): a CPU without bf16 units trains in fp32, so rungs
    # run on different machines can differ in numerics as well as pace. None where not recorded.
    precision: str | None = None

    def first_step_at(self, gate: float) -> int | None:
        return next((step for step, share in sorted(self.shares.items()) if share >= gate), None)

    def clears(self, bar: float) -> bool:
        return self.finished and bool(self.shares) and self.shares[max(self.shares)] >= bar


def pilots_under(root: Path) -> list[Pilot]:
    """Every pilot folder (x<multiple>-<arm>) under root, ordered by multiple and arm."""
    found = []
    for folder in root.glob("x*-*"):
        if not folder.is_dir():
            continue  # a run's log sits beside its folder
        multiple, _, arm = folder.name[1:].partition("-")
        try:
            found.append(Pilot(arm, float(multiple), folder))
        except ValueError:
            continue  # not a pilot folder
    return sorted(found, key=lambda p: (p.multiple, p.arm))


def pilots_recorded(paths: list[Path], args: argparse.Namespace) -> list[Pilot]:
    """Runs read back from the JSON an earlier call wrote (--out), for runs whose logs are gone: the same seed, study,
    scale and base budget as this call, or a one-line error. A run in several files is merged where one file lacks a
    field (a run read from its logs keeps no command); two values of one field are refused, naming both files."""
    found: dict[tuple[float, str], tuple[Pilot, Path]] = {}
    for path in paths:
        try:
            saved = json.loads(path.read_text())
            setting = tuple(saved[key] for key in ("seed", "study", "scale", "base_budget"))
            runs = [Pilot(r["arm"], float(r["multiple"]), Path(r["root"]), list(r["command"]), r["wall_seconds"],
                          r["stopped_at_wall"], r["finished"], r["steps"], r["seconds_per_step"],
                          {int(step): float(share) for step, share in r["shares"].items()}, r.get("precision"))
                    for r in saved["runs"]]
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
            raise SystemExit(f"--earlier {path}: not a pilot JSON written by --out ({error!r})") from None
        if setting != (args.seed, args.study, args.scale, args.base_budget):
            raise SystemExit(f"--earlier {path} holds seed, study, scale, base budget {setting}, not this call's "
                             f"{(args.seed, args.study, args.scale, args.base_budget)}: give the same settings")
        for run in runs:
            key = (run.multiple, run.arm)
            found[key] = (merged(found[key][0], run, found[key][1], path) if key in found else run, path)
    return [run for run, _ in found.values()]


def merged(first: Pilot, second: Pilot, first_file: Path, second_file: Path) -> Pilot:
    """One run read in two files: each field from whichever file has it (an empty command or a missing wall time
    is no value); two different values are an error that says which file to leave out."""
    fields = {}
    for name, one in vars(first).items():
        other = getattr(second, name)
        if one in (None, []):
            fields[name] = other
        elif other in (None, []) or one == other or name == "root":  # where it was read is no reading
            fields[name] = one
        else:
            raise SystemExit(f"--earlier: {first.arm} at {first.multiple:g} x has {name} {one!r} in {first_file} and "
                             f"{other!r} in {second_file}; give only the file whose reading you keep")
    return Pilot(**fields)


def chosen_multiple(pilots: list[Pilot], arms: list[str], bars: dict[str, float], gate: float,
                    rungs: list[float]) -> tuple[float | None, str]:
    """The rule: the smallest of `rungs` at which every arm's finished run clears its bar; a rung with a finished run
    below its bar is passed over, and the first one missing a run (or with one unfinished) leaves the choice open."""
    by_multiple: dict[float, dict[str, Pilot]] = {}
    for pilot in pilots:
        by_multiple.setdefault(pilot.multiple, {})[pilot.arm] = pilot
    missed = []
    for multiple in sorted(rungs):
        runs = by_multiple.get(multiple, {})
        failed = [a for a, p in runs.items() if a in arms and p.finished and not p.clears(bars.get(a, gate))]
        if failed:
            missed.append(f"{multiple:g} x missed ({', '.join(failed)})")
            continue
        waiting = [a for a in arms if a not in runs or not runs[a].finished]
        if waiting:
            return None, "; ".join(missed + [f"{multiple:g} x open: waiting for {', '.join(waiting)}"])
        return multiple, "; ".join(missed + [f"{multiple:g} x: every arm clears its bar"])
    return None, "; ".join(missed + ["no rung of the rule qualifies: it sets no budget"])


def read(pilot: Pilot) -> None:
    """Fill in what the run logged: its steps, their pace, and its own-loss shares at each validation."""
    run = next(pilot.root.glob("*/seed*/pretrain"), None)  # the study's one pretraining folder
    pilot.finished = run is not None and (run / "summary.json").is_file()
    if pilot.finished:
        pilot.precision = json.loads((run / "summary.json").read_text()).get("precision")
    if run is None or not (run / "tensorboard").is_dir():
        return
    values = scalar_frame(loaded_events(run / "tensorboard"))  # a resumed run's launches merged, as reports read it
    if {"val/own_below_unigram", "val/own_unigram"} <= set(values):
        shares = (values["val/own_below_unigram"] / values["val/own_unigram"]).dropna()
        pilot.shares = {int(step): float(share) for step, share in shares.items()}
    if "train/loss" in values:
        pilot.steps = int(values["train/loss"].dropna().index.max())
        pilot.seconds_per_step = pace(run / "tensorboard")


def pace(tensorboard: Path) -> float | None:
    """Seconds a training step, validation included, over a run's launches: each event file is one launch (a resumed
    run adds one), so the time between a stop and its restart is never counted, while the merged series would."""
    seconds = steps = 0.0
    for file in sorted(tensorboard.glob("events.out.tfevents.*")):
        wall = scalar_frame(loaded_events(file), wall_time=True)
        if "train/loss" in wall:
            logged = wall["train/loss"].dropna()
            seconds += logged.iloc[-1] - logged.iloc[0]
            steps += logged.index[-1] - logged.index[0]
    return seconds / steps if steps > 0 else None


def table(pilots: list[Pilot], bars: dict[str, float], gate: float) -> str:
    rows = ["| arm | budget | steps | s/step | wall s | own share below baseline, last | bar | first step >= bar | "
            "clears | precision |", "|---|---|---|---|---|---|---|---|---|---|"]
    for p in pilots:
        bar = bars.get(p.arm, gate)
        last = f"{p.shares[max(p.shares)]:.3f} (step {max(p.shares)})" if p.shares else "none logged"
        pace = f"{p.seconds_per_step:.4f}" if p.seconds_per_step else "-"
        wall = "-" if p.wall_seconds is None else f"{p.wall_seconds:.0f}"
        verdict = "yes" if p.clears(bar) else ("no" if p.finished else "unfinished")
        rows.append(f"| {p.arm} | {p.multiple:g} x | {p.steps} | {pace} | {wall} | {last} | {bar:g} | "
                    f"{p.first_step_at(bar) or '-'} | {verdict} | {p.precision or '-'} |")
    return "\n".join(rows)


def ladder_figure(pilots: list[Pilot], bars: dict[str, float], gate: float) -> Figure:
    """One panel per arm: each rung's share below the baseline against the step (dotted while unfinished), and the
    arm's bar dashed, so where a rung crosses the bar, and whether it stays above it, is seen at once."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    arms = list(dict.fromkeys(p.arm for p in pilots if p.shares))
    fig, axes = plt.subplots(1, max(len(arms), 1), figsize=(3.4 * max(len(arms), 1), 3.2), sharey=True, squeeze=False)
    for ax, arm in zip(axes[0], arms):
        for p in (p for p in pilots if p.arm == arm and p.shares):
            steps = sorted(p.shares)
            ax.plot(steps, [p.shares[s] for s in steps], marker=".", linestyle="-" if p.finished else ":",
                    label=f"{p.multiple:g} x" + ("" if p.finished else " (unfinished)"))
        ax.axhline(bars.get(arm, gate), color="grey", linestyle="--", linewidth=0.8)
        ax.set_title(f"{arm} (bar {bars.get(arm, gate):g})", fontsize=9)
        ax.set_xlabel("training step")
        ax.xaxis.set_major_locator(MaxNLocator(4))  # step counts of five digits collide at the default
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("own loss below baseline (share)")
    fig.tight_layout()
    return fig
