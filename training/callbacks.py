"""Budget accounting shared by every objective: tokens seen, FLOPs spent, throughput, learning rate, and the
token or FLOPs budget that stops a run."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback

from armlm.common.errors import ArmlmError
from armlm.common.migrations import migrate_token_accounting_state

log = logging.getLogger("armlm.train")


def logs_this_step(trainer: L.Trainer) -> bool:
    """Whether the logger writes this training step (every trainer.log_every_n_steps, and the last). Logging
    only then matters: each `self.log` costs Lightning milliseconds of Python, a visible share of a CPU step at
    several calls per step (docs/results/performance.md, "Figures moved out of code comments")."""
    return bool(trainer._logger_connector.should_update_logs)


class TokenAccounting(Callback):
    """Logs train/tokens_seen (input tokens), train/pred_tokens_seen (tokens that carried a loss),
    train/flops_seen (training matmul FLOPs: 3 x each step's forward count, models.flops), train/tokens_per_s
    and train/lr under the same tags for every objective, and stops training once `max_tokens` input tokens or
    `max_flops` FLOPs (summed over all ranks) have been spent, so runs of different objectives end at equal
    budgets. Validation is not counted. The counts are saved in checkpoints, so a resumed run keeps counting
    where it stopped.

    The counts that live on the device (tokens that carried a loss; input tokens of padded batches) are added up
    there and read when something asks for them (`tokens_seen`, `pred_tokens_seen`, `flops_seen`): at logging
    steps, at a checkpoint, and where the budget or a `watch`ed point could be reached by now, judged by the most
    tokens a step can feed. Where reading is free (`reads_every_step`: eager on a CPU) they are read every step. An
    unpadded batch's input tokens are its shape's, known without a read, so a token budget over packed blocks never
    waits for the device."""

    def __init__(self, max_tokens: int | None = None, max_flops: float | None = None) -> None:
        self.max_tokens, self.max_flops = max_tokens, max_flops
        self._tokens_seen = 0
        self._pred_tokens_seen = 0
        self._flops_seen = 0.0
        # Added since the last read: (padded input tokens, tokens with a loss, this rank's FLOPs) on the device, and
        # the most input tokens those steps can have fed (every rank), for judging whether a budget may be spent.
        self._pending: torch.Tensor | None = None
        self._pending_most_tokens = 0
        self._world = 1
        self.watched: list[int] = []  # input-token counts whose crossing a callback must see exactly (SaveAtTokens)
        # the input tokens seen before the first batch of each phase of a phased objective, as they happened (None:
        # a resumed checkpoint that predates this record, so an earlier phase's start is unknown)
        self.phase_starts: dict[str, int] | None = {}
        # Throughput is wall time between consecutive training batches (data loading included),
        # with validation and checkpointing pauses left out.
        self._clock: float | None = None
        self._window_seconds = 0.0
        self._window_start = (0, 0.0)  # (input tokens, FLOPs) when the window began

    # -- the counts, read from the device when asked --------------------------------------------------------------
    def _read(self) -> None:
        if self._pending is None:
            return
        pending, self._pending, self._pending_most_tokens = self._pending, None, 0
        if self._world > 1:  # one reduce and one read to the host for every count
            pending = self._trainer.strategy.reduce(pending, reduce_op="sum")
        padded_tokens, predicted, flops = pending.tolist()
        self._tokens_seen += int(padded_tokens)
        self._pred_tokens_seen += int(predicted)
        self._flops_seen += flops

    @property
    def tokens_seen(self) -> int:
        self._read()
        return self._tokens_seen

    @property
    def pred_tokens_seen(self) -> int:
        self._read()
        return self._pred_tokens_seen

    @property
    def flops_seen(self) -> float:
        self._read()
        return self._flops_seen

    def may_have_reached(self, tokens: int) -> bool:
        """Whether the input tokens seen could be `tokens` or more by now, without reading the device."""
        return self._tokens_seen + self._pending_most_tokens >= tokens

    def watch(self, tokens: list[int]) -> None:
        self.watched.extend(int(n) for n in tokens)

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if self._clock is None:
            self._clock = time.perf_counter()
            self._window_start = (self.tokens_seen, self.flops_seen)

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._clock = None

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if not outputs:  # a batch skipped for a non-finite loss (nonfinite_loss=skip): nothing trained
            return
        self._trainer, self._world = trainer, trainer.world_size
        self._add(outputs, batch)
        self.watched = [n for n in self.watched if n > self._tokens_seen]  # a point surely passed needs no read
        reads_every_step = getattr(pl_module, "reads_every_step", True) or (
            self._world > 1 and self.max_flops is not None)  # ranks' FLOPs differ: a FLOPs budget sums them each step
        if reads_every_step or logs_this_step(trainer) or any(self.may_have_reached(n) for n in self.watched):
            self._read()
        # Stop only where an optimiser step ends (with gradient accumulation, not inside a window, whose work
        # would be counted but never applied).
        window_ends = optimizer_step_ends(trainer, batch_idx)
        spent = ((self.max_tokens is not None and self.may_have_reached(self.max_tokens)
                  and self.tokens_seen >= self.max_tokens)
                 or (self.max_flops is not None and self.flops_seen >= self.max_flops))
        if window_ends and spent:
            trainer.should_stop = True
        now = time.perf_counter()
        self._window_seconds += now - (self._clock or now)
        self._clock = now
        if logs_this_step(trainer):
            pl_module.log("train/tokens_seen", float(self.tokens_seen))
            pl_module.log("train/pred_tokens_seen", float(self.pred_tokens_seen))
            pl_module.log("train/flops_seen", self.flops_seen)
            pl_module.log("train/lr", trainer.optimizers[0].param_groups[0]["lr"])
            if self._window_seconds > 0:
                tokens, flops = self.tokens_seen - self._window_start[0], self.flops_seen - self._window_start[1]
                pl_module.log("train/tokens_per_s", tokens / self._window_seconds, prog_bar=True)
                peak = getattr(pl_module, "peak_flops", None)
                if peak:  # the share of the devices' peak the step's matmuls ran at (models.flops counts them)
                    pl_module.log("train/mfu", flops / self._window_seconds / (peak * self._world))
                self._window_seconds, self._window_start = 0.0, (self.tokens_seen, self.flops_seen)

    def _add(self, outputs: dict[str, Any], batch: dict[str, Any]) -> None:
        """One step's counts: on the host where they are known there, else onto the device's pending sum."""
        padded = "attention_mask" in batch
        step_most = batch["input_ids"].numel() * self._world
        if padded:
            self._pending_most_tokens += step_most
        else:  # every position is an input token: the shape says how many, on every rank
            self._tokens_seen += step_most
        flops = float(outputs["flops"])  # a host number (each objective counts from shapes and counts it has read)
        if self._world == 1:
            self._flops_seen += flops
        predicted = torch.as_tensor(outputs["predicted_tokens"])
        device = predicted.device
        on_device = [torch.as_tensor(outputs["input_tokens"], device=device) if padded else predicted.new_zeros(()),
                     predicted, predicted.new_zeros(()) if self._world == 1 else predicted.new_full((), flops)]
        step = torch.stack([value.to(torch.float64) for value in on_device])
        self._pending = step if self._pending is None else self._pending + step

    def phase_started(self, phase: str) -> None:
        """Called before each training batch with the objective's phase: its first call for a phase records where
        the phase began."""
        if self.phase_starts is not None and phase not in self.phase_starts:
            self.phase_starts[phase] = self.tokens_seen

    def state_dict(self) -> dict[str, Any]:
        return {"tokens_seen": self.tokens_seen, "pred_tokens_seen": self.pred_tokens_seen,
                "flops_seen": self.flops_seen, "phase_starts": self.phase_starts}

    @staticmethod
    def saved_tokens(checkpoint: Mapping[str, Any]) -> int | None:
        """The input tokens a Lightning checkpoint's TokenAccounting state recorded (None: it recorded none, so armlm
        pretraining did not write it), read without restoring the callback."""
        tokens = checkpoint.get("callbacks", {}).get(TokenAccounting.__qualname__, {}).get("tokens_seen")
        return None if tokens is None else int(tokens)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state = migrate_token_accounting_state(state_dict)  # None: what an older checkpoint did not count
        self._pending, self._pending_most_tokens = None, 0
        self._tokens_seen = int(state["tokens_seen"])
        self._pred_tokens_seen = int(state["pred_tokens_seen"])
        if state["flops_seen"] is None and self.max_flops is not None:
            raise ArmlmError("this checkpoint predates FLOPs counting (no flops_seen), so a FLOPs budget cannot "
                             "resume from it; resume with its token budget (max_tokens=..., max_flops=null)")
        self._flops_seen = float(state["flops_seen"] or 0.0)
        starts = state["phase_starts"]
        self.phase_starts = None if starts is None and self.tokens_seen > 0 else dict(starts or {})


class FirstStep(Callback):
    """Logs train/startup_s, the seconds from the run's start (`started`, a time.perf_counter reading) to the end of
    its first training step: data preparation, model building and, for a compiled step, the compilation."""

    def __init__(self, started: float) -> None:
        self.started, self.seconds = started, None

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self.seconds is None:
            self.seconds = time.perf_counter() - self.started
            log.info("first training step done %.1f s after the run started", self.seconds)
            pl_module.log("train/startup_s", self.seconds)


def optimizer_step_ends(trainer: L.Trainer, batch_idx: int) -> bool:
    """Whether this batch ends an optimiser step, as Lightning accumulates gradients: the `accumulate_grad_batches`-th
    batch of a window, or the epoch's last batch (Lightning steps there on a partial window). A checkpoint or a stop
    inside a window would hold tokens counted but not yet applied to the weights."""
    return (batch_idx + 1) % trainer.accumulate_grad_batches == 0 or bool(trainer.is_last_batch)


class SaveAtTokens(Callback):
    """Write checkpoints/tokens-<N>.ckpt at the end of the first optimiser step whose input tokens reach each N: a
    run's state part-way through its budget (same data order; the learning rate not yet annealed), so one pretraining
    run can be fine-tuned at two budgets. Put it after `tokens` in the callback list."""

    def __init__(self, tokens: TokenAccounting, points: list[int], folder: Path) -> None:
        self.tokens, self.points, self.folder = tokens, sorted(int(n) for n in points), folder
        tokens.watch(self.points)  # its count is read where a point could have been reached

    @staticmethod
    def path(folder: Path, tokens: int) -> Path:
        return folder / f"tokens-{tokens}.ckpt"

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        for n in self.points:
            target = self.path(self.folder, n)
            # (a resumed run has written it already)
            if (not target.is_file() and optimizer_step_ends(trainer, batch_idx)
                    and self.tokens.may_have_reached(n) and self.tokens.tokens_seen >= n):
                trainer.save_checkpoint(target, weights_only=False)  # the full state, as last.ckpt holds


class SaveAtSteps(Callback):
    """Write checkpoints/step-<S>.ckpt at the end of optimiser step S (where a shorter budget's decay starts, for its
    cooldown branch: training.branches). Keyed on the step, not the tokens, so padded batches, skipped steps and
    accumulation cannot move it. Each is written once: a resumed run never comes back to a step it has passed, and
    the micro-batches after step S (same global_step) do not write again."""

    def __init__(self, steps: list[int], folder: Path) -> None:
        self.steps, self.folder, self.written = set(steps), folder, set()

    @staticmethod
    def path(folder: Path, step: int) -> Path:
        return folder / f"step-{step}.ckpt"

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        step = trainer.global_step
        if step in self.steps and step not in self.written:
            self.written.add(step)
            trainer.save_checkpoint(self.path(self.folder, step), weights_only=False)  # a branch resumes from it


class ValidateAtEnd(Callback):
    """Make the last training step validate and checkpoint.

    Lightning validates every `val_check_interval` batches, but not at a `max_steps` that is no multiple of
    it, so the final val/loss and last.ckpt would describe an older model. Asking the loop to stop at the
    last step triggers its end-of-training validation (and with it the checkpoint callbacks)."""

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if 0 < trainer.max_steps <= trainer.global_step:
            trainer.should_stop = True


class DataPosition(Callback):
    """Tell the DataModule how far through its epoch training has got (the epoch and the batches trained on,
    skipped non-finite ones included): the DataModule keeps it in its state_dict, which Lightning saves in every
    checkpoint, so a resumed run's sampler continues after those batches. Put it first in the callback list, so
    a checkpoint written by a later callback of the same step (SaveAtTokens) already counts the step."""

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        trainer.datamodule.trained_through(trainer.current_epoch, batch_idx + 1)
