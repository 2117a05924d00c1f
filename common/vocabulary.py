"""The special tokens every armlm tokenizer has, and the corpus statistics objectives need."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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
        counts = self.unigram_counts.astype(np.float64) + 0.5
        counts[list(self.special_ids)] = 0.0
        log_p = np.log(counts / counts.sum(), where=counts > 0, out=np.full_like(counts, -np.inf))
        ordinary = token_ids[~np.isin(token_ids, self.special_ids)]
        if ordinary.size == 0:
            raise ValueError("no ordinary tokens to score against the unigram baseline")
        return float(-log_p[ordinary].mean())
