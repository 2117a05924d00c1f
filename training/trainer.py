"""The run skeleton shared by pretraining and fine-tuning: one way to build the Trainer (the trainer group's
settings, the `logger` group's loggers under the run folder, checkpoints written atomically, the last step validated) and one
way to write the run's result file."""

from __future__ import annotations

import logging
import math
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import lightning as L
from hydra.utils import instantiate
from lightning.pytorch.callbacks import Callback, ModelCheckpoint, ProgressBar, RichProgressBar
from lightning.pytorch.loggers import Logger
from lightning.pytorch.utilities import rank_zero_warn
from omegaconf import DictConfig, open_dict

from armlm.common.atomic import atomic_write_artefact
from armlm.common.cli import lightning_through_the_root
from armlm.common.errors import ArmlmError
from armlm.common.provenance import armlm_commit
from armlm.training.callbacks import ValidateAtEnd
from armlm.training.checkpoint_io import AtomicCheckpointIO
from armlm.training.setup import TRAINER_ARGUMENTS, check_run_arguments

progress_log = logging.getLogger("armlm.progress")


class RunProgressBar(RichProgressBar):
    """Lightning's rich bar, without its `Epoch 0/-2`: a budget in tokens runs with max_epochs=-1, so the bar names
    the epoch alone (and `Epoch 1/3` where a number of epochs is set)."""

    def _get_train_description(self, current_epoch: int) -> str:
        epochs = self.trainer.max_epochs
        return f"Epoch {current_epoch}" + (f"/{epochs - 1}" if epochs is not None and epochs > 0 else "")


class ProgressLines(ProgressBar):
    """Progress as log lines, for output that is not a terminal (a log file, a batch job's output, a pipe), where the
    rich bar is drawn once, when training ends: every `every_s` seconds of training, one line with the step, the
    share of the run, the time so far and left, and what the bar shows (the metrics logged with prog_bar). It reads
    those metrics only when it writes a line, so it adds no per-step host read."""

    def __init__(self, every_s: float = 30.0) -> None:
        super().__init__()
        self.every_s, self.shown = every_s, True
        self.started = self.last_line = 0.0
        self.first_step = 0

    @property
    def is_enabled(self) -> bool:  # LightningModule.print asks the progress bar
        return self.shown

    @property
    def is_disabled(self) -> bool:
        return not self.shown

    def disable(self) -> None:
        self.shown = False

    def enable(self) -> None:
        self.shown = True

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.started = self.last_line = time.monotonic()
        self.first_step = trainer.global_step  # a resumed run estimates from its own steps

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        now = time.monotonic()
        if self.shown and trainer.is_global_zero and now - self.last_line >= self.every_s:
            self.last_line = now
            progress_log.info(self.line(trainer, pl_module, now))

    def line(self, trainer: L.Trainer, pl_module: L.LightningModule, now: float) -> str:
        step, planned = trainer.global_step, getattr(pl_module, "planned_steps", None)  # a module may plan its own
        total = float(planned() if planned else trainer.estimated_stepping_batches)
        elapsed, done = now - self.started, step - self.first_step
        text = f"step {step:,}"
        if math.isfinite(total) and total > 0:
            text += f" of {int(total):,} ({100 * step / total:.0f} %)"
        text += f", {minutes(elapsed)}"
        if math.isfinite(total) and total > 0 and done > 0:
            text += f", about {minutes(elapsed / done * max(0.0, total - step))} left"
        shown = {k: v for k, v in self.get_metrics(trainer, pl_module).items() if k != "v_num"}
        return text + "".join(f"; {k} {v:.4g}" if isinstance(v, float) else f"; {k} {v}" for k, v in shown.items())


def minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} m {int(seconds % 60):02d} s"


def progress_display() -> Callback:
    """The rich bar on a terminal; elsewhere progress lines, which a log file keeps as the run goes."""
    return RunProgressBar() if sys.stdout.isatty() else ProgressLines()


class DropTips(logging.Filter):
    """Lightning's advertisements ("💡 Tip: ... litlogger / litmodels"), which say nothing about the run."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.getMessage()).startswith("💡 Tip")


# Where Lightning logs what it says on rank 0 ("GPU available: ...", its tips)
RANK_ZERO_LOGGERS = ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero")


def quiet_lightning() -> None:
    """Keep a run's output to what its user needs (progress, budget, where it wrote): no Lightning tips, no
    deprecation warning that Lightning's own code triggers inside torch (`LeafSpec`), which no setting fixes, and
    each of Lightning's messages once, by the command's own route (lightning_through_the_root)."""
    for name in RANK_ZERO_LOGGERS:
        logging.getLogger(name).addFilter(DropTips())
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)")
    lightning_through_the_root()


class RunCheckpoint(ModelCheckpoint):
    """A checkpoint callback of one run folder. Lightning warns at setup that the folder holds files, before it knows
    whether the fit resumes, and a fit resumed from a checkpoint in this folder (or its run folder) writes there by
    design. So the warning waits for training to start and is given only where the fit did not resume from there."""

    NOT_EMPTY = "exists and is not empty"

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=f".*{self.NOT_EMPTY}")
            super().setup(trainer, pl_module, stage)
        self.found_files = bool(stage == "fit" and self._fs.isdir(self.dirpath) and self._fs.ls(self.dirpath))

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_train_start(trainer, pl_module)
        # this folder, or the run folder, where SLURM's requeue leaves hpc_ckpt_<n>.ckpt (default_root_dir)
        resumed_here = bool(trainer.ckpt_path) and any(inside(str(trainer.ckpt_path), str(folder))
                                                       for folder in (self.dirpath, trainer.default_root_dir))
        if self.found_files and not resumed_here:
            rank_zero_warn(f"Checkpoint directory {self.dirpath} {self.NOT_EMPTY}: this fit did not resume from it, "
                           "so it may overwrite another run's checkpoints")


def inside(path: str, folder: str) -> bool:
    return os.path.normpath(os.path.abspath(path)).startswith(os.path.normpath(os.path.abspath(folder)) + os.sep)


class LastCheckpoint(RunCheckpoint):
    """<dirpath>/last.ckpt written at every validation, the end of training included: the end of the token budget
    that fine-tuning, scoring, exports and a resume read. Since Lightning 2.6 a ModelCheckpoint's `save_last` file is
    written only at a step where that callback also wrote a top-k checkpoint: with a monitored best that is a step
    where the metric improved, so last.ckpt held the best step, not the last (tests/test_checkpoints.py); with
    save_top_k=0 it was written once, when training ended. Here the file is this callback's one top-k checkpoint,
    monitored by nothing, so it is replaced at each save whatever the metrics did."""

    NAME = "last"  # last.ckpt

    def __init__(self, dirpath: Path) -> None:
        super().__init__(dirpath=dirpath, filename=self.NAME, monitor=None, save_top_k=1, save_last=False,
                         enable_version_counter=False)

    @property
    def path(self) -> str:
        """<dirpath>/last.ckpt where it exists, else ''. Read from the folder, not the callback's state: a run resumed
        from a checkpoint an older callback wrote, or from a folder since moved, restores no path or another one."""
        last = Path(self.dirpath) / f"{self.NAME}{self.FILE_EXTENSION}"
        return str(last) if last.is_file() else ""


def checkpoints(out: Path, best_by: str | None = None) -> list[ModelCheckpoint]:
    """<out>/checkpoints/last.ckpt at every validation (LastCheckpoint), after, with `best_by`, the checkpoint of the
    lowest value of that metric (best-step<N>.ckpt)."""
    last = LastCheckpoint(out / "checkpoints")
    if best_by is None:
        return [last]
    best = RunCheckpoint(dirpath=out / "checkpoints", filename="best-step{step}", auto_insert_metric_name=False,
                         monitor=best_by, mode="min", save_top_k=1)
    return [best, last]


def build_loggers(loggers: DictConfig | None, out: Path) -> list[Logger]:
    """The `logger` group's loggers (TensorBoard by default; CSV, W&B), each writing under the run folder `out`.
    Every logger receives the same `self.log` calls, so the tags are the same in each."""
    return [instantiate(config, save_dir=str(out)) for config in (loggers or {}).values()]


def lightning_settings(trainer: DictConfig) -> DictConfig:
    """The trainer group without armlm's `step` settings: what Lightning's Trainer takes."""
    lightning = trainer.copy()
    with open_dict(lightning):
        lightning.pop("step", None)
    return lightning


def check_sharded_clipping(trainer: DictConfig) -> None:
    """Refuse norm clipping under FSDP. armlm measures and clips with the total norm of the gradients the optimiser
    holds (training.gradients.ClipsUnscaledGradients); under FSDP each rank holds only its shard, so each would clip by a
    norm of its own. Lightning refuses this for its own clipping, and armlm's hook would pass it by."""
    clips_by_norm = trainer.get("gradient_clip_val") and str(trainer.get("gradient_clip_algorithm")).lower() != "value"
    if clips_by_norm and "fsdp" in str(trainer.get("strategy") or "").lower():
        raise ArmlmError(f"trainer.gradient_clip_val={trainer.gradient_clip_val} under FSDP would clip each rank's "
                         "shard by its own norm (no global norm is built or proven on a GPU yet): use trainer=ddp, or "
                         "add trainer.gradient_clip_val=null for a run without clipping (unlike trainer=ddp's recipe)")


def build_trainer(trainer: DictConfig, out: Path, callbacks: list[Callback], loggers: DictConfig | None = None,
                  **overrides: Any) -> L.Trainer:
    """The `trainer` group's Trainer for a run writing into `out`: `callbacks` (the run's own, then
    ValidateAtEnd so a run stopped by max_steps mid-epoch validates and checkpoints its last step),
    the `logger` group's loggers (tags shared by every objective), and AtomicCheckpointIO (a kill
    mid-write keeps the previous checkpoint). `overrides` are the settings a kind of run fixes itself."""
    check_sharded_clipping(trainer)
    # the Trainer's arguments set here (+trainer.max_epochs=5 beside fine-tuning's task.epochs would change nothing)
    check_run_arguments(trainer, [*TRAINER_ARGUMENTS, *overrides], "trainer")
    bar = [progress_display()] if trainer.get("enable_progress_bar", True) else []
    return instantiate(
        lightning_settings(trainer), default_root_dir=str(out), callbacks=[*callbacks, ValidateAtEnd(), *bar],
        logger=build_loggers(loggers, out) or False, plugins=[AtomicCheckpointIO()], **overrides,
    )


def write_items(trainer: L.Trainer, path: Path, items: dict[str, Any]) -> None:
    """Per-item statistics of a run's evaluations (one line of JSON; they run to thousands of numbers), by one
    process, atomically; nothing where the run's metrics give none."""
    if trainer.is_global_zero and items:
        atomic_write_artefact(path, items, compact=True)


def write_result(trainer: L.Trainer, path: Path, result: dict[str, Any]) -> None:
    """The run's summary as JSON, written atomically by one process (every DDP rank holds the same reduced
    figures), with the precision it trained at: train.py picks fp32 on a CPU without bf16 units, so two machines
    can run one config at two precisions, and a report must be able to tell; and the code that ran it (a study
    kept across machines can span commits)."""
    if trainer.is_global_zero:
        atomic_write_artefact(path, {**result, "precision": str(trainer.precision), "code": armlm_commit()})
