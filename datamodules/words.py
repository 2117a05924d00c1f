"""Whitespace words in the token stream, as the BabyLM challenge counts a budget: which tokens open a word.

A token opens a whitespace word when its first character starts its document or follows whitespace; `str.split`
counts exactly those words (a word the tokenizer drops whole, e.g. one of control characters only, is the one
miss). The flags are laid out as the token cache lays out its ids ([EOD] after every non-empty document, never a
word) and kept beside the train split's shards as `word-starts.npy`, built on first use by encoding the split again
with character offsets, which the cache's fast encoder skips. Each packed block's words are then a sum, and so are
the words of any step of a run (training.milestones)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer
from tqdm.auto import tqdm

from armlm.common.atomic import atomic_file
from armlm.common.errors import ArmlmError
from armlm.common.vocabulary import EOD
from armlm.datamodules.tokenizer import ENCODE_BATCH

WORD_STARTS = "word-starts.npy"
log = logging.getLogger(__name__)


def word_opening_tokens(tokenizer: Tokenizer, documents: Iterable[str], desc: str = "") -> tuple[np.ndarray, np.ndarray]:
    """The documents' token ids as the cache writes them, and beside each a 1 where that token opens a whitespace
    word (0 for [EOD])."""
    eod = tokenizer.token_to_id(EOD)
    ids: list[np.ndarray] = []
    flags: list[np.ndarray] = []

    def encode(batch: list[str]) -> None:
        for text, encoding in zip(batch, tokenizer.encode_batch(batch, add_special_tokens=False), strict=True):
            if encoding.ids:
                opens = [begin == 0 or text[begin - 1].isspace() for begin, _ in encoding.offsets]
                ids.append(np.asarray([*encoding.ids, eod], dtype=np.int64))
                flags.append(np.asarray([*opens, False], dtype=np.uint8))

    batch: list[str] = []
    for text in tqdm(documents, desc=f"finding word starts {desc}".strip(), unit="doc"):
        batch.append(text)
        if len(batch) == ENCODE_BATCH:
            encode(batch)
            batch = []
    encode(batch)
    if not ids:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.uint8)
    return np.concatenate(ids), np.concatenate(flags)


def word_starts(folder: Path, tokenizer: Tokenizer, documents: Iterable[str], cached: np.ndarray) -> np.ndarray:
    """The split's word-opening flags, one per cached token: read from <folder>/word-starts.npy, or built and kept
    there once the ids they were built with are checked equal to the cache's (`cached`)."""
    path = folder / WORD_STARTS
    if path.is_file():
        flags = np.load(path, mmap_mode="r")
        if len(flags) == len(cached):
            return flags
        log.warning("%s holds %d flags for %d tokens: building it again", path, len(flags), len(cached))
    ids, flags = word_opening_tokens(tokenizer, documents, folder.name)
    if len(ids) != len(cached) or not np.array_equal(ids, np.asarray(cached[: len(cached)], dtype=np.int64)):
        raise ArmlmError(f"{folder}: the corpus, encoded again to find its word starts, differs from the token cache "
                         "(the corpus changed since the cache was written?); delete the folder to rebuild both")
    with atomic_file(path, "wb") as f:
        np.save(f, flags)
    return flags


def block_words(flags: np.ndarray, span: int) -> np.ndarray:
    """Words opened in each packed block of `span` stream tokens (datamodules.blocks.PackedBlocks: block i holds
    tokens [i * span, (i + 1) * span); the tail that fills no block is dropped)."""
    blocks = len(flags) // span
    return np.asarray(flags[: blocks * span], dtype=np.int64).reshape(blocks, span).sum(axis=1)
