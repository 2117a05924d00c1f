"""The special tokens every armlm tokenizer has, and the corpus statistics objectives need."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from armlm.common.errors import ArmlmError

# Fixed order, so the ids are the same in every tokenizer armlm trains.
PAD, UNK, CLS, SEP, MASK, EOD = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[EOD]"
SPECIAL_TOKENS = (PAD, UNK, CLS, SEP, MASK, EOD)
IGNORE_INDEX = -100  # label of positions that carry no loss (PyTorch's cross-entropy default)


@dataclass(frozen=True)
class Vocabulary:
    """Token ids of the special tokens plus the training corpus' unigram counts."""

    size: int
    pad_id: int
    unk_id: int
    cls_id: int
    sep_id: int
    mask_id: int
    eod_id: int  # end of document: separates documents in packed blocks
    unigram_counts: np.ndarray  # (size,) int64 counts over the training split

    @property
    def special_ids(self) -> tuple[int, ...]:
        return (self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id, self.eod_id)

    def unigram_nll(self, token_ids: np.ndarray) -> float:
        """Mean NLL (nats) of `token_ids` under the add-½ smoothed training unigram over ordinary tokens.

        This is the baseline a model that ignores context would reach; a trained model's val/loss
        should end clearly below it.
        """
        return self.unigram_nll_of_counts(np.bincount(np.asarray(token_ids), minlength=self.size))

    def target_unigram_log_probs(self) -> np.ndarray:
        """(size,) log-probabilities of the add-½ smoothed training unigram over every id a loss can target:
        every id but [PAD] and [MASK] ([EOD] included, which AR predicts). The baseline of the learning gate,
        read at exactly the targets an objective's loss scored."""
        return smoothed_unigram_log_probs(self.unigram_counts, excluded=(self.pad_id, self.mask_id))

    def unigram_nll_of_counts(self, counts: np.ndarray) -> float:
        """`unigram_nll` of the tokens these per-id counts describe."""
        return smoothed_unigram_nll(self.unigram_counts, counts, excluded=self.special_ids)


def smoothed_unigram_log_probs(train_counts: np.ndarray, excluded: tuple[int, ...]) -> np.ndarray:
    """(size,) log p(v) of the add-½ smoothed unigram of `train_counts` over every id but `excluded` (-inf there):
    p(v) = (c_v + 1/2) / sum_{u not excluded} (c_u + 1/2)."""
    train = np.asarray(train_counts, dtype=np.float64) + 0.5
    train[list(excluded)] = 0.0
    with np.errstate(divide="ignore"):
        return np.log(train / train.sum())


def smoothed_unigram_nll(train_counts: np.ndarray, counts: np.ndarray, excluded: tuple[int, ...]) -> float:
    """Mean NLL (nats) of the tokens that `counts` (per id) describe under the add-½ smoothed unigram of
    `train_counts` (per id) over every id but `excluded`:

        p(v) = (c_v + 1/2) / sum_{u not excluded} (c_u + 1/2),   NLL = -sum_v n_v log p(v) / sum_v n_v.

    Scored tokens of an excluded id are left out (the callers that may see one check for it first)."""
    log_p = smoothed_unigram_log_probs(train_counts, excluded)
    size = len(log_p)
    log_p[np.isinf(log_p)] = 0.0  # the excluded ids, whose scored counts are zeroed below
    scored = np.asarray(counts, dtype=np.float64)[:size].copy()
    scored[list(excluded)] = 0.0
    if scored.sum() == 0:
        raise ArmlmError("no ordinary tokens to score against the unigram baseline")
    return float(-(scored * log_p).sum() / scored.sum())
