"""Checkpoints at word milestones, as the BabyLM challenge counts words: whitespace words of the training text,
repeats included (its 2025 rules: a checkpoint every 1M words up to 10M, every 10M up to 100M, every 100M up to 1B,
and at most 10 passes over the corpus).

The words are counted as they are seen. Each packed block's words are known (datamodules.words: the tokens that open
a whitespace word), and the loader's order is replayed before training, each rank's seeded sampler epoch by epoch,
so the words of every step are summed in advance. A milestone's checkpoint is written at the end of the first
optimiser step whose batches hold its words (with gradient accumulation, the end of its window): never early, and
late by less than one optimiser step's words. `save_at_words=[<words>, ...]` saves checkpoints/words-<W>.ckpt at
each; `save_at_words=babylm` the 2025 schedule up to the run's budget, refusing a budget over 10 passes.
`armlm export checkpoint=<run> milestones=true out=<folder>` writes each as <folder>/chck_<N>M.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import lightning as L
import numpy as np
from omegaconf import DictConfig

from armlm.common.babylm import BABYLM, BABYLM_MAX_EPOCHS, WORDS_CHECKPOINT, babylm_schedule, milestone_name
from armlm.common.errors import ArmlmError
from armlm.datamodules.pretrain import PretrainDataModule
from armlm.datamodules.sampler import ResumableSampler, rank_batches
from armlm.training.callbacks import SaveAtTokens, TokenAccounting

log = logging.getLogger("armlm.train")

class SaveAtWords(SaveAtTokens):
    """checkpoints/words-<W>.ckpt the first time the input tokens seen reach the count that holds W words."""

    def __init__(self, tokens: TokenAccounting, points: dict[int, int], folder: Path) -> None:
        self.words_at = {n: w for w, n in points.items()}  # token count -> the words it stands for
        self.started_at: int | None = None
        super().__init__(tokens, list(points.values()), folder)

    def path(self, folder: Path, tokens: int) -> Path:  # type: ignore[override]
        return folder / WORDS_CHECKPOINT.format(words=self.words_at[tokens])

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Only a milestone crossed in this fit is written: a resumed run that starts past one it never saved (the
        # setting added on resume) would otherwise save weights from after it under its name.
        self.started_at = self.tokens.tokens_seen
        self.points = [n for n in self.points if n > self.started_at or self.path(self.folder, n).is_file()]

    def written(self) -> dict[int, int]:
        """words -> input tokens of each milestone whose checkpoint exists."""
        return {w: n for n, w in self.words_at.items() if self.path(self.folder, n).is_file()}


def words_by_batch(block_words: np.ndarray, batch_size: int, world_size: int, seed: int, batches: int) -> np.ndarray:
    """Words seen by the end of each global batch 1..`batches`: the training loader's order replayed, each rank's
    sampler (datamodules.sampler, seeded as the loader's) epoch by epoch, cut into full batches as the loader cuts
    them (datamodules.sampler.rank_batches); a global batch is every rank's batch of that index."""
    examples = range(len(block_words))
    full = rank_batches(len(block_words), batch_size, world_size)
    per_batch: list[np.ndarray] = []
    done, epoch = 0, 0
    while done < batches:
        ranks = []
        for rank in range(world_size):
            sampler = ResumableSampler(examples, num_replicas=world_size, rank=rank, seed=seed)  # type: ignore[arg-type]
            sampler.set_epoch(epoch)
            order = np.fromiter(iter(sampler), dtype=np.int64)
            ranks.append(block_words[order[: full * batch_size]].reshape(full, batch_size).sum(axis=1))
        per_batch.append(np.sum(ranks, axis=0))
        done += len(per_batch[-1])
        epoch += 1
    return np.cumsum(np.concatenate(per_batch))[:batches]


def optimizer_step_end_mask(batches: int, batches_per_epoch: int, accumulate: int) -> np.ndarray:
    """(batches,) bool: whether each global batch ends an optimiser step, as Lightning accumulates gradients (and
    training.callbacks.optimizer_step_ends reads it): every `accumulate`-th batch of an epoch, and the epoch's last."""
    index = np.arange(batches) % batches_per_epoch
    return ((index + 1) % accumulate == 0) | (index == batches_per_epoch - 1)


def word_points(setting: object, seen: np.ndarray, positions_per_step: int, epochs: float,
                step_ends: np.ndarray | None = None) -> dict[int, int]:
    """words -> the input tokens at the end of the first optimiser step whose batches hold them, for `save_at_words`
    (a list of word counts, or "babylm"); `seen`: the words seen by the end of each global batch (words_by_batch),
    `positions_per_step` input tokens each; `step_ends`: the batches that end an optimiser step (None: every one)."""
    budget_words = int(seen[-1])
    if setting == BABYLM:
        if epochs > BABYLM_MAX_EPOCHS:
            raise ArmlmError(f"save_at_words=babylm: the budget is {epochs:.1f} passes over the corpus; the challenge "
                             f"allows at most {BABYLM_MAX_EPOCHS}: lower max_tokens (or data_epochs)")
        words = babylm_schedule(budget_words)
    else:
        words = list(setting)  # type: ignore[call-overload]
        if any(isinstance(w, bool) or not isinstance(w, int) or not 0 < w <= budget_words for w in words):
            raise ArmlmError(f"save_at_words={words}: give word counts between 0 and the budget's "
                             f"{budget_words:,} words, or save_at_words=babylm")
    ends = np.flatnonzero(np.ones(len(seen), bool) if step_ends is None else step_ends)
    # the batch that holds each milestone's words, then the end of the optimiser step it belongs to
    batches = {w: int(ends[np.searchsorted(ends, np.searchsorted(seen, w, side="left"))]) + 1 for w in sorted(set(words))}
    if len(set(batches.values())) < len(batches):
        raise ArmlmError(f"save_at_words={sorted(batches)}: two milestones fall in the same optimiser step "
                         f"({positions_per_step:,} input tokens a batch); space them further apart")
    return {w: batch * positions_per_step for w, batch in batches.items()}


def stop_batch(budget_tokens: int, positions_per_batch: int, max_steps: int, accumulate: int,
               batches_per_epoch: int) -> int:
    """The global batches a run trains: it stops at the end of the optimiser step whose tokens reach `budget_tokens`
    (training.callbacks.TokenAccounting), or at its `max_steps`-th optimiser step (-1: none) if that comes first,
    which partial windows at epochs' ends can bring forward."""
    reach = math.ceil(int(budget_tokens) / positions_per_batch)
    step_ends = np.flatnonzero(optimizer_step_end_mask(reach + accumulate, batches_per_epoch, accumulate)) + 1
    stop = int(step_ends[np.searchsorted(step_ends, reach)])
    return min(stop, int(step_ends[max_steps - 1])) if 0 < max_steps <= len(step_ends) else stop


def save_at_words(cfg: DictConfig, trainer: L.Trainer, datamodule: PretrainDataModule, tokens: TokenAccounting,
                  budget_tokens: int | None, folder: Path) -> SaveAtWords | None:
    """Add the word-milestone checkpoints `save_at_words` asks for to `trainer` (once the data and the budget are
    known: `budget_tokens`, the input tokens a token or step budget takes); the callback, whose `written()` says
    which were saved (None where none were asked for)."""
    setting = cfg.get("save_at_words")
    if not setting:
        return None
    if not budget_tokens:
        raise ArmlmError("save_at_words needs a budget in tokens or steps to place its milestones in (a FLOPs "
                         "budget's length is an estimate): give max_tokens, data_epochs or trainer.max_steps")
    world, accumulate = trainer.world_size, trainer.accumulate_grad_batches
    positions_per_batch = datamodule.batch_size * world * datamodule.block_size
    block_words = datamodule.block_words()
    per_epoch = rank_batches(len(block_words), datamodule.batch_size, world)
    batches = stop_batch(budget_tokens, positions_per_batch, trainer.fit_loop.epoch_loop.max_steps, accumulate,
                         per_epoch)
    ends = optimizer_step_end_mask(batches, per_epoch, accumulate)
    seen = words_by_batch(block_words, datamodule.batch_size, world, datamodule.seed, batches)
    points = word_points(setting, seen, positions_per_batch, budget_tokens / datamodule.epoch_positions(world), ends)
    callback = SaveAtWords(tokens, points, folder)
    trainer.callbacks.append(callback)  # after `tokens`, as SaveAtTokens needs
    log.info("word milestones (the words of each step's blocks, counted): %s",
             ", ".join(f"{milestone_name(w)} at {n:,} tokens" for w, n in points.items()))
    return callback
