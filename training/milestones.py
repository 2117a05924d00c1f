"""Checkpoints at word milestones, as the BabyLM challenge counts words: whitespace words of the training text,
repeats included (its 2025 rules: a checkpoint every 1M words up to 10M, every 10M up to 100M, every 100M up to 1B,
and at most 10 passes over the corpus).

armlm counts input tokens as it trains; the train split's words per token (its whitespace words over the positions
one pass gives, the ratio summary.json's `words_seen` uses) turns a word milestone into the first token count at or
past it. The blocks seen by then are a shuffled sample of the split, so the words in them differ from the milestone
by that sample's spread about the mean (bench/milestone_words.py counts them exactly: a fraction of a percent on
gutenwiki-10m, either side), plus up to one batch. `save_at_words=[<words>, ...]` saves
checkpoints/words-<W>.ckpt at each; `save_at_words=babylm` the 2025 schedule up to the run's budget, refusing a budget
over 10 passes. `armlm export checkpoint=<run> milestones=true out=<folder>` writes each as <folder>/chck_<N>M.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import lightning as L
from omegaconf import DictConfig

from armlm.common.babylm import BABYLM, BABYLM_MAX_EPOCHS, WORDS_CHECKPOINT, babylm_schedule, milestone_name
from armlm.common.errors import ArmlmError
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


def word_points(setting: object, words_per_token: float, budget_tokens: int, epochs: float) -> dict[int, int]:
    """words -> the input tokens that hold them, for `save_at_words` (a list of word counts, or "babylm")."""
    budget_words = budget_tokens * words_per_token
    if setting == BABYLM:
        if epochs > BABYLM_MAX_EPOCHS:
            raise ArmlmError(f"save_at_words=babylm: the budget is {epochs:.1f} passes over the corpus; the challenge "
                             f"allows at most {BABYLM_MAX_EPOCHS}: lower max_tokens (or data_epochs)")
        words = babylm_schedule(budget_words)
    else:
        words = list(setting)  # type: ignore[call-overload]
        if any(isinstance(w, bool) or not isinstance(w, int) or not 0 < w <= budget_words for w in words):
            raise ArmlmError(f"save_at_words={words}: give word counts between 0 and the budget's "
                             f"{budget_words:,.0f} words, or save_at_words=babylm")
    points = {w: min(budget_tokens, math.ceil(w / words_per_token)) for w in sorted(set(words))}
    if len(set(points.values())) < len(points):
        raise ArmlmError(f"save_at_words={sorted(points)}: two milestones fall in the same input token at "
                         f"{words_per_token:.3f} words a token; space them further apart")
    return points


def save_at_words(cfg: DictConfig, trainer: L.Trainer, train_words: float | None, epoch_positions: int,
                  tokens: TokenAccounting, budget_tokens: int | None, folder: Path) -> SaveAtWords | None:
    """Add the word-milestone checkpoints `save_at_words` asks for to `trainer` (once the data and the budget are
    known: `budget_tokens`, the input tokens a token or step budget takes); the callback, whose `written()` says
    which were saved (None where none were asked for)."""
    setting = cfg.get("save_at_words")
    if not setting:
        return None
    if train_words is None:
        raise ArmlmError("save_at_words needs the train split's word count, which this token cache predates; "
                         "build it again (a fresh data.cache_dir)")
    if not budget_tokens:
        raise ArmlmError("save_at_words needs a budget in tokens or steps to place its milestones in (a FLOPs "
                         "budget's length is an estimate): give max_tokens, data_epochs or trainer.max_steps")
    words_per_token = train_words / epoch_positions
    points = word_points(setting, words_per_token, int(budget_tokens), budget_tokens / epoch_positions)
    callback = SaveAtWords(tokens, points, folder)
    trainer.callbacks.append(callback)  # after `tokens`, as SaveAtTokens needs
    log.info("word milestones (%.3f words a token): %s", words_per_token,
             ", ".join(f"{milestone_name(w)} at {n:,} tokens" for w, n in points.items()))
    return callback
