"""Run a study's stages, each as its own process, skipping finished ones and resuming interrupted ones.

One process launch per run keeps every stage independent of the driver: a DDP stage (trainer=ddp) starts
its ranks from a fresh `python train.py`, never from inside a Hydra multirun (hydra issue 2070), and a
crash or an out-of-memory kill takes down one stage, not the study. `launcher: in_process` runs the same command
functions on the same composed configs inside the driver instead: no interpreter start-up per stage (the test
suite's smoke studies), at the price of that independence.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from hydra.core.hydra_config import HydraConfig
from hydra.errors import InstantiationException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue

from armlm.common.atomic import atomic_write_artefact, read_artefact
from armlm.common.commands import check_command, check_unapplied, script_path
from armlm.common.composition import composition_problem, first_line
from armlm.common.config import compose_config
from armlm.common.errors import ArmlmError
from armlm.common.unapplied import SHARED_SETTINGS
from armlm.studies.plan import Stage

log = logging.getLogger("armlm.study")
RECORD = "stage.json"
LAUNCHERS = ("process", "in_process")
# Characters that Hydra's override grammar would read as syntax inside an unquoted path.
UNSAFE_PATH_CHARS = set(" ,=[]{}()'\"\\$")


@dataclass
class Outcome:
    stage: Stage
    # skipped (done before) | restored (from the study's record) | done | failed | waiting (inputs) | refused (an input
    # run learned nothing)
    status: str
    seconds: float = 0.0
    detail: str = ""


def check_root(root: Path) -> None:
    unsafe = sorted(UNSAFE_PATH_CHARS.intersection(str(root)))
    if unsafe:
        raise ArmlmError(f"root={root} contains {unsafe}, which Hydra overrides cannot carry unquoted; "
                         "choose a study folder without them")


def check_record(stage: Stage) -> None:
    """A folder that holds another study's stage (other settings) must not be taken as this one's."""
    path = stage.folder / RECORD
    if not path.is_file():
        if stage.done_file.is_file():
            raise ArmlmError(f"{stage.folder} holds {stage.done_file.name} but no {RECORD}: it was not run by this "
                             "study; move it away or choose another root=")
        return
    recorded, ours = read_artefact(path), stage.record()
    differing = {k: (recorded.get(k), v) for k, v in ours.items() if recorded.get(k) != v}
    if differing:
        details = "; ".join(f"{k}: folder has {old}, this study has {new}" for k, (old, new) in differing.items())
        raise ArmlmError(f"{stage.folder} was run with other settings ({details}). Rerun with the settings it "
                         "was started with, choose another root=, or delete that folder to redo it")


def resume_overrides(stage: Stage) -> tuple[list[str], str]:
    """ckpt_path=<its last checkpoint> when an earlier launch of the stage left one, and a note saying so."""
    last = stage.folder / "checkpoints" / "last.ckpt"
    if stage.command.resumes and last.is_file():
        return [f"ckpt_path={last}"], f"resuming from {last}"
    return [], ""


def command(stage: Stage, prefix: dict[str, list[str]]) -> tuple[list[str], str]:
    """The stage's command line, resuming from its last checkpoint if an earlier launch left one."""
    resume, note = resume_overrides(stage)
    overrides = [*stage.overrides, f"hydra.run.dir={stage.folder}", *resume]
    return [*prefix.get(stage.kind, []), *process_line(stage), *overrides], note


def process_line(stage: Stage) -> list[str]:
    """How a stage's process starts: the checkout's script where it has one (Lightning restarts DDP ranks from it),
    else the installed command line, `python -m armlm <command>`."""
    kind = stage.command
    script = script_path(kind.script)
    return [sys.executable, script] if script else [sys.executable, "-m", "armlm", kind.command]


def stage_settings(stage: Stage) -> list[str]:
    """The overrides its command composes with: the stage's own, its run folder, and a resume where it left one."""
    return [*stage.overrides, f"output_dir={stage.folder}", *resume_overrides(stage)[0]]


def composed_or_error(stage: Stage) -> DictConfig | Exception:
    try:
        return compose_config(str(stage.command.config), stage_settings(stage))
    except Exception as err:  # noqa: BLE001 - reported by refuse_stages_that_cannot_start
        return err


def refusal(stage: Stage, cfg: DictConfig) -> Exception | None:
    """What the stage's command would refuse its composed config for before running (common.commands.check_command), if
    anything. Its own resume is left to its run: a checkpoint an older armlm wrote fails that stage alone, as it did."""
    if cfg.get("ckpt_path"):
        cfg = copy.deepcopy(cfg)
        cfg.ckpt_path = None
    try:
        check_command(stage.command, cfg, stage_settings(stage), unapplied="skip")
    except (ArmlmError, MissingMandatoryValue) as err:
        return err
    except InstantiationException as err:  # a class that fails to build otherwise: its own error
        return err.__cause__ or err
    return None


def shape(stage: Stage) -> tuple[str, ...]:
    """Its command and settings with its own seed and run folders taken out: the stages of one task, variant or
    objective compose alike whichever arm's checkpoint they read and whichever seed they run."""
    own = f"/{stage.arm}/seed{stage.seed}/"
    return (str(stage.command.config), *(o.replace(own, "/<arm>/<seed>/") for o in stage.overrides
                                         if o != f"seed={stage.seed}"))


def refuse_stages_that_cannot_start(stages: list[Stage], composed: dict[Stage, DictConfig | Exception]) -> None:
    """A stage whose settings do not compose (a task no config names, an override of a key that is not there), or
    that its command refuses (a value out of range), failed only at its turn, after the stages before it had run (a
    typo in tasks= cost the whole pretraining). One stage of each shape left to run is composed and checked before
    any starts (unless `composed`, the in-process launcher's configs, already holds its config), and a failure stops
    the launch."""
    shapes: dict[tuple[str, ...], Stage] = {}
    for stage in stages:
        if not stage.done_file.is_file():
            shapes.setdefault(shape(stage), stage)
    fix = "none of the stages left has started: fix the study's settings (tasks=, extra_*=, the study config's arms)"
    for stage in shapes.values():
        # composition alone: an in-process stage's error may be its device, its own failure at its turn
        cfg = composed.get(stage)
        cfg = cfg if isinstance(cfg, DictConfig) else composed_or_error(stage)
        if isinstance(cfg, Exception):
            problem = composition_problem(str(stage.command.config), stage_settings(stage), cfg,
                                          stage.command.open_settings) or (  # Hydra's line names no setting
                f"{first_line(cfg)}, from one of {' '.join(stage.overrides)}")
            raise ArmlmError(f"{stage.name}: its settings do not compose ({problem}); {fix}") from cfg
        error = refusal(stage, cfg)
        if error is not None:
            raise ArmlmError(f"{stage.name}: its command refuses its settings ({first_line(error)}); {fix}") from error


def in_process_config(stage: Stage) -> DictConfig | Exception:
    """The config the stage's command would compose in a process of its own (the run folder given as output_dir),
    for `launcher=in_process`; where it does not compose, or names a device this machine lacks, the error, which
    is that stage's failure when it runs, as its process would report it. A stage of several processes (DDP over
    more than one device or node) is refused: in-process, each stage runs inside the study's one process."""
    try:
        cfg = compose_config(str(stage.command.config), stage_settings(stage))
        processes = stage.command.processes(cfg)
    except Exception as err:  # noqa: BLE001 - kept as the stage's failure
        return err
    if processes > 1:
        raise ArmlmError(f"{stage.name}: its trainer is {processes} processes (trainer.devices="
                         f"{cfg.trainer.get('devices')}, trainer.num_nodes={cfg.trainer.get('num_nodes', 1)}), which "
                         "launcher=in_process does not start: it runs each stage inside the study's one process; "
                         "leave launcher=process, the default, for this study")
    return cfg


def run_in_process(stage: Stage, composed: DictConfig | Exception) -> int:
    """The stage's command function on its composed config (in_process_config), with the config saved where Hydra
    saves it; 0 when it finished, 1 when it raised (the error is logged). torch's fp32 matmul precision, which a
    pretraining or fine-tuning run sets for the process, is set back after it: a stage that sets none (diagnostics,
    zero-shot scoring on a GPU) runs at the study process's, as it would in a process of its own."""
    precision = torch.get_float32_matmul_precision()
    try:
        if isinstance(composed, Exception):
            raise composed
        cfg = composed
        (stage.folder / ".hydra").mkdir(parents=True, exist_ok=True)
        OmegaConf.save(cfg, stage.folder / ".hydra" / "config.yaml")
        check_unapplied(stage.command, cfg, stage_settings(stage), shared=True)  # as a stage's process says them
        stage.command.function()(cfg)
    except Exception as err:  # noqa: BLE001 - a failed stage is reported and the study goes on, as with a process
        log.error("%s: %s: %s", stage.name, type(err).__name__, err)
        return 1
    finally:
        torch.set_float32_matmul_precision(precision)
    return 0


def cut_launch_seconds(before: dict, stage: Stage) -> float:
    """Wall seconds of a launch that never came back (killed with its driver, e.g. at a session's end), from its
    start to its stage's last checkpoint: the work the next launch resumes from. 0 if the last launch came back."""
    started = before.get("started_at")
    last = stage.folder / "checkpoints" / "last.ckpt"
    if started is None or not last.is_file():
        return 0.0
    # a checkpoint stamped in the future (copied without its times, a skewed clock) is read as written now
    return max(0.0, round(min(last.stat().st_mtime, time.time()) - started, 1))


def how_launched(launcher: str) -> dict[str, object]:
    """How this launch runs its stages, for its records: each in a process of its own or inside this one, and how
    many launches of the same sweep run at once at most (a Hydra multirun's parallel launcher: joblib's n_jobs, as
    given, -1 for every core; None for a plain launch). Concurrent launches are processes of their own that share
    nothing but the caches, which have writer locks (tests/test_study_runs.py holds a seed run beside another to the
    same bits as run alone)."""
    sweep = HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN
    hydra_launcher = HydraConfig.get().launcher if sweep else {}
    return {"launcher": launcher, "sweep_launcher": str(hydra_launcher.get("_target_")) if sweep else None,
            "sweep_n_jobs": hydra_launcher.get("n_jobs") if sweep else None}


def launch(stage: Stage, prefix: dict[str, list[str]], launcher: str = "process",
           composed: DictConfig | Exception | None = None) -> Outcome:
    """Run the stage as a process of its own, or inside this one on its config (composed before the study's first
    stage where `composed` is given, else now)."""
    if launcher == "in_process" and composed is None:
        composed = in_process_config(stage)
    argv, note = command(stage, prefix)
    stage.folder.mkdir(parents=True, exist_ok=True)
    record_path = stage.folder / RECORD
    before = json.loads(record_path.read_text()) if record_path.is_file() else {}
    # started_at (epoch seconds) stays in the record until the launch comes back, so a launch killed with its
    # driver is still counted by the next one, up to its last checkpoint
    cut = cut_launch_seconds(before, stage)
    record = {**stage.record(), "launches": before.get("launches", 0) + 1, "command": argv,
              "launched": how_launched(launcher),
              "seconds": round(before.get("seconds", 0.0) + cut, 1), "started_at": time.time()}
    atomic_write_artefact(record_path, record)
    if cut:
        note = f"{note}; the last launch did not come back: {cut:.0f} s counted to its last checkpoint"
    log.info("%s: running%s\n  %s", stage.name, f" ({note})" if note else "", " ".join(argv))
    started = time.perf_counter()
    returncode = (run_in_process(stage, composed) if launcher == "in_process"
                  else subprocess.run(argv, env={**os.environ, SHARED_SETTINGS: stage.name}).returncode)
    seconds = round(time.perf_counter() - started, 1)
    # wall seconds over every launch (a resumed stage's own summary times only its last launch)
    atomic_write_artefact(record_path, {**record, "seconds": round(record["seconds"] + seconds, 1), "started_at": None})
    if returncode == 0 and stage.done_file.is_file():
        return Outcome(stage, "done", seconds, note)
    logs = ", ".join(str(p) for p in sorted(stage.folder.glob("*.log"))) or "its output above"
    return Outcome(stage, "failed", seconds, f"exit status {returncode}; see {logs}")


def unlearned(needs: tuple[Path, ...]) -> list[Path]:
    """The input runs whose result says they learned nothing (train.py's summary.json: learned: false)."""
    found = []
    for need in needs:
        try:
            result = json.loads(need.read_text()) if need.suffix == ".json" and need.is_file() else {}
        except (OSError, ValueError):
            continue
        if isinstance(result, dict) and result.get("learned") is False:
            found.append(need)
    return found


def run_stages(stages: list[Stage], prefix: dict[str, list[str]] | None = None, dry_run: bool = False,
               on_done: Callable[[Stage], object] | None = None, launcher: str = "process",
               allow_unlearned: bool = False) -> list[Outcome]:
    """Run every stage whose inputs are done, until none can start. Stages whose input stage failed, or
    lies outside this launch (arm=/seed= selections), are reported as waiting. `prefix` maps a stage kind
    to the launcher put before its `python` (e.g. srun); `on_done` is called after each stage that finishes
    (the study's record keeps finished units as they come); `launcher` runs each stage as its own process or inside
    this one (LAUNCHERS). A stage whose input run learned nothing (its held-out loss not below its unigram baseline)
    is refused unless `allow_unlearned`."""
    if launcher not in LAUNCHERS:
        raise ArmlmError(f"launcher={launcher!r}; choose one of {LAUNCHERS}")
    prefix = prefix or {}
    for stage in stages:
        check_record(stage)  # every mismatch is found before any work starts
    # in-process: every stage left to run composed before the first runs, so a study it cannot run stops here
    composed = ({s: in_process_config(s) for s in stages if not s.done_file.is_file()} if launcher == "in_process"
                else {})
    refuse_stages_that_cannot_start(stages, composed)
    outcomes: dict[Stage, Outcome] = {}
    planned: set[Path] = set()  # dry run: done files the planned stages would write
    progress = True
    while progress:
        progress = False
        for stage in stages:
            if stage in outcomes:
                continue
            if stage.done_file.is_file():
                outcomes[stage] = Outcome(stage, "skipped", detail=f"{stage.done_file.name} exists")
            elif all(need.is_file() or need in planned for need in stage.needs):
                stalled = [] if allow_unlearned else unlearned(stage.needs)
                if stalled:
                    runs = ", ".join(str(need.parent) for need in stalled)
                    outcomes[stage] = Outcome(stage, "refused", detail=f"{runs} did not learn (summary.json: learned: "
                                              "false); fix that run, or give allow_unlearned=true to use it anyway")
                    log.error("%s: refused: %s", stage.name, outcomes[stage].detail)
                elif dry_run:
                    outcomes[stage] = Outcome(stage, "planned", detail=" ".join(command(stage, prefix)[0]))
                    planned.add(stage.done_file)
                else:
                    outcomes[stage] = launch(stage, prefix, launcher, composed.get(stage))
                    log.info("%s: %s (%.0f s) %s", stage.name, outcomes[stage].status, outcomes[stage].seconds,
                             outcomes[stage].detail)
                    if on_done is not None and outcomes[stage].status == "done":
                        on_done(stage)
            else:
                continue
            progress = True
    for stage in stages:
        if stage not in outcomes:
            missing = [str(n) for n in stage.needs if not n.is_file()]
            outcomes[stage] = Outcome(stage, "waiting", detail=f"needs {', '.join(missing)}")
    return list(outcomes.values())  # in the order the stages ran
