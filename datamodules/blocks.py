"""Objective-agnostic views over a token cache: packed blocks, and [CLS] A [SEP] B [SEP] segment pairs."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import Dataset

from armlm.common.errors import ArmlmError
from armlm.common.vocabulary import Vocabulary


def document_ids(block: np.ndarray, eod_id: int) -> np.ndarray:
    """Each position's document within a packed block: the number of [EOD]s strictly before it, so an [EOD] belongs
    to the document it ends and the leading [CLS] to the first (attention within documents lets every document see
    that [CLS] and the [CLS] only itself: models.attention)."""
    ends = block == eod_id
    return np.cumsum(ends) - ends


class PackedBlocks(Dataset):
    """Contiguous fixed-length blocks `[CLS] + block_size - 1 tokens` of the document stream.

    Documents are separated by [EOD] inside the stream; the tail that does not fill a block is dropped.
    AR and MLM runs read exactly the same blocks, so they see the same data at the same step. With
    `documents`, each block also carries `document_ids` (`document_ids`), which objectives turn into attention that
    stays within a document (data.cross_document_attention=false)."""

    def __init__(self, tokens: np.ndarray, block_size: int, vocab: Vocabulary, documents: bool = False) -> None:
        self.tokens, self.span, self.cls_id = tokens, block_size - 1, vocab.cls_id
        self.eod_id = vocab.eod_id if documents else None
        self.n_blocks = len(tokens) // self.span

    def __len__(self) -> int:
        return self.n_blocks

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        block = np.empty(self.span + 1, dtype=np.int64)
        block[0] = self.cls_id
        block[1:] = self.tokens[i * self.span : (i + 1) * self.span]
        if self.eod_id is None:
            return {"input_ids": torch.from_numpy(block)}
        return {"input_ids": torch.from_numpy(block), "document_ids": torch.from_numpy(document_ids(block, self.eod_id))}


@dataclass
class SegmentPair:
    a: np.ndarray
    b: np.ndarray
    doc_a: int
    doc_b: int
    is_next: bool  # b is the real continuation of a


class SegmentPairs(Dataset):
    """Sentence-pair inputs for next-sentence prediction, drawn deterministically per index.

    A is a span of a document (documents picked in proportion to their length); half of the time B is the
    span that follows A in the same document, otherwise a span of another document. nsp_labels: 1 = B
    continues A, 0 = B is from another document. One epoch holds about as many tokens as the packed blocks."""

    def __init__(self, tokens: np.ndarray, doc_offsets: np.ndarray, block_size: int, vocab: Vocabulary,
                 seed: int = 0) -> None:
        self.tokens, self.block_size, self.vocab, self.seed = tokens, block_size, vocab, seed
        # Document bodies without their trailing [EOD]; only documents with >= 2 tokens can be split.
        starts, ends = doc_offsets[:-1], doc_offsets[1:] - 1
        usable = (ends - starts) >= 2
        self.starts, self.ends = starts[usable], ends[usable]
        if len(self.starts) < 2:
            raise ArmlmError(
                f"next-sentence prediction needs at least 2 documents with 2+ tokens, this split has "
                f"{len(self.starts)}; use a corpus with more documents"
            )
        self.cum_lengths = np.cumsum(self.ends - self.starts)
        self.budget = block_size - 3  # room for [CLS], [SEP], [SEP]
        self.n_pairs = max(1, int(self.cum_lengths[-1]) // (block_size - 1))

    def __len__(self) -> int:
        return self.n_pairs

    def _random_doc(self, rng: np.random.Generator) -> int:
        return int(np.searchsorted(self.cum_lengths, rng.integers(self.cum_lengths[-1]), side="right"))

    def pair(self, i: int) -> SegmentPair:
        rng = np.random.default_rng([self.seed, i])
        doc_a = self._random_doc(rng)
        start, end = int(self.starts[doc_a]), int(self.ends[doc_a])
        total = min(self.budget, end - start)
        offset = start + int(rng.integers(0, end - start - total + 1))
        len_a = int(rng.integers(1, total))  # both segments non-empty
        a = self.tokens[offset : offset + len_a]
        is_next = bool(rng.random() < 0.5)
        if is_next:
            return SegmentPair(a, self.tokens[offset + len_a : offset + total], doc_a, doc_a, True)
        doc_b = self._random_doc(rng)
        while doc_b == doc_a:
            doc_b = self._random_doc(rng)
        b_start, b_end = int(self.starts[doc_b]), int(self.ends[doc_b])
        len_b = min(total - len_a, b_end - b_start)
        b_offset = b_start + int(rng.integers(0, b_end - b_start - len_b + 1))
        return SegmentPair(a, self.tokens[b_offset : b_offset + len_b], doc_a, doc_b, False)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        p, v = self.pair(i), self.vocab
        n_a, n_b = len(p.a), len(p.b)
        ids = np.full(self.block_size, v.pad_id, dtype=np.int64)
        ids[0], ids[1 : 1 + n_a], ids[1 + n_a] = v.cls_id, p.a, v.sep_id
        ids[2 + n_a : 2 + n_a + n_b], ids[2 + n_a + n_b] = p.b, v.sep_id
        types = np.zeros(self.block_size, dtype=np.int64)
        types[2 + n_a : 3 + n_a + n_b] = 1
        mask = np.zeros(self.block_size, dtype=np.int64)
        mask[: 3 + n_a + n_b] = 1
        return {
            "input_ids": torch.from_numpy(ids),
            "token_type_ids": torch.from_numpy(types),
            "attention_mask": torch.from_numpy(mask),
            "nsp_labels": torch.tensor(int(p.is_next)),
        }
