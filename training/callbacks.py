"""Budget accounting shared by every objective: tokens seen, FLOPs spent, throughput, learning rate, and the
token or FLOPs budget that stops a run."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback

from common.migrations import migrate_token_accounting_state


def logs_this_step(trainer: L.Trainer) -> bool:
    """Whether the logger writes this training step (every trainer.log_every_n_steps, and the last). Logging
    only then matters: each `self.log` costs Lightning milliseconds of Python, a visible share of a CPU step at
    several calls per step (docs/results.md, "Figures moved out of code comments")."""
    return bool(trainer._logger_connector.should_update_logs)


class TokenAccounting(Callback):
    """Logs train/tokens_seen (input tokens), train/pred_tokens_seen (tokens that carried a loss),
    train/flops_seen (training matmul FLOPs: 3 x each step's forward count, models.flops), train/tokens_per_s
    and train/lr under the same tags for every objective, and stops training once `max_tokens` input tokens or
    `max_flops` FLOPs (summed over all ranks) have been spent, so runs of different objectives end at equal
    budgets. Validation is not counted. The counts are saved in checkpoints, so a resumed run keeps counting
    where it stopped."""

    def __init__(self, max_tokens: int | None = None, max_flops: float | None = None) -> None:
        self.max_tokens, self.max_flops = max_tokens, max_flops
        self.tokens_seen = 0
        self.pred_tokens_seen = 0
        self.flops_seen = 0.0
        # the input tokens seen before the first batch of each phase of a phased objective, as they happened (None:
        # a resumed checkpoint that predates this record, so an earlier phase's start is unknown)
        self.phase_starts: dict[str, int] | None = {}
        # Throughput is wall time between consecutive training batches (data loading included),
        # with validation and checkpointing pauses left out.
        self._clock: float | None = None
        self._window_seconds = 0.0
        self._window_tokens = 0

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if self._clock is None:
            self._clock = time.perf_counter()

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._clock = None

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if not outputs:  # a batch skipped for a non-finite loss (nonfinite_loss=skip): nothing trained
            return
        counts = torch.stack([outputs["input_tokens"], outputs["predicted_tokens"]]).to(torch.float64)
        counts = torch.cat([counts, counts.new_tensor([outputs["flops"]])])  # one reduce, one read to the host
        input_tokens, predicted_tokens, flops = trainer.strategy.reduce(counts, reduce_op="sum").tolist()
        self.tokens_seen += int(input_tokens)
        self.pred_tokens_seen += int(predicted_tokens)
        self.flops_seen += flops
        now = time.perf_counter()
        self._window_seconds += now - (self._clock or now)
        self._clock = now
        self._window_tokens += int(input_tokens)
        # Stop only where an optimiser step ends (with gradient accumulation, not inside a window, whose work
        # would be counted but never applied).
        window_ends = (batch_idx + 1) % trainer.accumulate_grad_batches == 0
        spent = ((self.max_tokens is not None and self.tokens_seen >= self.max_tokens)
                 or (self.max_flops is not None and self.flops_seen >= self.max_flops))
        if window_ends and spent:
            trainer.should_stop = True
        if logs_this_step(trainer):
            pl_module.log("train/tokens_seen", float(self.tokens_seen))
            pl_module.log("train/pred_tokens_seen", float(self.pred_tokens_seen))
            pl_module.log("train/flops_seen", self.flops_seen)
            pl_module.log("train/lr", trainer.optimizers[0].param_groups[0]["lr"])
            if self._window_seconds > 0:
                pl_module.log("train/tokens_per_s", self._window_tokens / self._window_seconds, prog_bar=True)
                self._window_seconds, self._window_tokens = 0.0, 0

    def phase_started(self, phase: str) -> None:
        """Called before each training batch with the objective's phase: its first call for a phase records where
        the phase began."""
        if self.phase_starts is not None:
            self.phase_starts.setdefault(phase, self.tokens_seen)

    def state_dict(self) -> dict[str, Any]:
        return {"tokens_seen": self.tokens_seen, "pred_tokens_seen": self.pred_tokens_seen,
                "flops_seen": self.flops_seen, "phase_starts": self.phase_starts}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state = migrate_token_accounting_state(state_dict)  # None: what an older checkpoint did not count
        self.tokens_seen = int(state["tokens_seen"])
        self.pred_tokens_seen = int(state["pred_tokens_seen"])
        if state["flops_seen"] is None and self.max_flops is not None:
            raise ValueError("this checkpoint predates FLOPs counting (no flops_seen), so a FLOPs budget cannot "
                             "resume from it; resume with its token budget (max_tokens=..., max_flops=null)")
        self.flops_seen = float(state["flops_seen"] or 0.0)
        starts = state["phase_starts"]
        self.phase_starts = None if starts is None and self.tokens_seen > 0 else dict(starts or {})


class SaveAtTokens(Callback):
    """Write checkpoints/tokens-<N>.ckpt the first time the input tokens seen reach each N: a run's state
    part-way through its budget (same data order; the learning rate not yet annealed), so one pretraining run
    can be fine-tuned at two budgets. Put it after `tokens` in the callback list."""

    def __init__(self, tokens: TokenAccounting, points: list[int], folder: Path) -> None:
        self.tokens, self.points, self.folder = tokens, sorted(int(n) for n in points), folder

    @staticmethod
    def path(folder: Path, tokens: int) -> Path:
        return folder / f"tokens-{tokens}.ckpt"

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        for n in self.points:
            target = self.path(self.folder, n)
            if self.tokens.tokens_seen >= n and not target.is_file():  # a resumed run has written it already
                trainer.save_checkpoint(target)


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
            trainer.save_checkpoint(self.path(self.folder, step))


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
