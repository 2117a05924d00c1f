"""Checkpoints at word milestones, as the BabyLM challenge counts words: whitespace words of the training text,
repeats included (its 2025 rules: a checkpoint every 1M words up to 10M, every 10M up to 100M, every 100M up to 1B,
and at most 10 passes over the corpus).

The words are counted as they are seen. Each packed block's words are known (datamodules.words: the tokens that open
a whitespace word), and the loader's order is replayed before training, each rank's seeded sampler epoch by epoch,
so the words of every step are summed in advance. A milestone's checkpoint is written at the end of the first step
whose batches hold its words: never early, and late by less than one step's words. `save_at_words=[<words>, ...]`
saves checkpoints/words-<W>.ckpt at each; `save_at_words=babylm` the 2025 schedule up to the run's budget, refusing a
budget over 10 passes. `armlm export checkpoint=<run> milestones=true out=<folder>` writes each as <folder>/chck_<N>M.
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
from armlm.datamodules.sampler import ResumableSampler
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


def words_by_step(block_words: np.ndarray, batch_size: int, world_size: int, seed: int, steps: int) -> np.ndarray:
    """Words seen by the end of each global step 1..`steps`: the training loader's order replayed, each rank's
    sampler (datamodules.sampler, seeded as the loader's) epoch by epoch, cut into full batches as the loader cuts
    them; a global step is every rank's batch of that index."""
    examples = range(len(block_words))
    per_step: list[np.ndarray] = []
    done, epoch = 0, 0
    while done < steps:
        ranks = []
        for rank in range(world_size):
            sampler = ResumableSampler(examples, num_replicas=world_size, rank=rank, seed=seed)  # type: ignore[arg-type]
            sampler.set_epoch(epoch)
            order = np.fromiter(iter(sampler), dtype=np.int64)
            batches = len(order) // batch_size
            ranks.append(block_words[order[: batches * batch_size]].reshape(batches, batch_size).sum(axis=1))
        per_step.append(np.sum(ranks, axis=0))
        done += len(per_step[-1])
        epoch += 1
    return np.cumsum(np.concatenate(per_step))[:steps]


def word_points(setting: object, seen: np.ndarray, positions_per_step: int, epochs: float) -> dict[int, int]:
    """words -> the input tokens at the end of the first step whose batches hold them, for `save_at_words` (a list of
    word counts, or "babylm"); `seen`: the words seen by the end of each step (words_by_step)."""
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
    steps = {w: int(np.searchsorted(seen, w, side="left")) + 1 for w in sorted(set(words))}
    if len(set(steps.values())) < len(steps):
        raise ArmlmError(f"save_at_words={sorted(steps)}: two milestones fall in the same step "
                         f"({positions_per_step:,} input tokens); space them further apart")
    return {w: step * positions_per_step for w, step in steps.items()}


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
    world = trainer.world_size
    positions_per_step = datamodule.batch_size * world * datamodule.block_size
    steps = math.ceil(int(budget_tokens) / positions_per_step)
    seen = words_by_step(datamodule.block_words(), datamodule.batch_size, world, datamodule.seed, steps)
    points = word_points(setting, seen, positions_per_step, budget_tokens / datamodule.epoch_positions(world))
    callback = SaveAtWords(tokens, points, folder)
    trainer.callbacks.append(callback)  # after `tokens`, as SaveAtTokens needs
    log.info("word milestones (the words of each step's blocks, counted): %s",
             ", ".join(f"{milestone_name(w)} at {n:,} tokens" for w, n in points.items()))
    return callback
