"""A static-vectors folder: what `armlm embeddings method=...` writes and what fine-tuning and the benchmarks read.

    vectors.kv        gensim KeyedVectors (`KeyedVectors.load`; fastText's keep their n-grams)
    vectors.txt       the same words in word2vec's text format (`KeyedVectors.load_word2vec_format`)
    tokenizer.json    the pretraining tokenizer whose normalizer and pre-tokenizer split the words
    summary.json      method, settings, seed, corpus, vocabulary size, wall time (written last: the folder is done)
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gensim.models.keyedvectors import KeyedVectors

from armlm.common.atomic import atomic_write_artefact
from armlm.common.errors import ArmlmFileError
from armlm.embeddings.words import WordSplitter

VECTORS, TEXT, TOKENIZER, SUMMARY = "vectors.kv", "vectors.txt", "tokenizer.json", "summary.json"


def save_vectors(folder: Path, vectors: KeyedVectors, tokenizer_json: str, summary: dict[str, Any]) -> None:
    """Every file is written in a temporary folder and moved in; summary.json comes last, so a folder that has
    it is complete and a killed run leaves no half-written vectors behind."""
    folder.mkdir(parents=True, exist_ok=True)
    remove_partial(folder)
    (folder / SUMMARY).unlink(missing_ok=True)  # the folder is not done until the new vectors are in
    with tempfile.TemporaryDirectory(dir=folder, prefix=".vectors-") as tmp:
        vectors.save(str(Path(tmp) / VECTORS))  # may add side files (vectors.kv.vectors.npy) for large arrays
        vectors.save_word2vec_format(str(Path(tmp) / TEXT), binary=False)
        Path(tmp, TOKENIZER).write_text(tokenizer_json, encoding="utf-8")
        for written in Path(tmp).iterdir():
            os.replace(written, folder / written.name)
    atomic_write_artefact(folder / SUMMARY, summary)


@dataclass
class StaticVectors:
    """Loaded vectors with the word splitting they were trained under."""

    path: Path
    keyed: KeyedVectors
    tokenizer_json: str
    summary: dict[str, Any]

    @property
    def dim(self) -> int:
        return int(self.keyed.vector_size)

    def word_vector(self, word: str, splitter: WordSplitter) -> np.ndarray | None:
        """The vector of a word as a task writes it: the mean of its pieces' vectors after the tokenizer's
        splitting ('U.S.' -> u . s .), over the pieces that have one. None when none has (fastText always has
        one: its n-grams build it)."""
        pieces = [p for p in splitter.split(word) if p in self.keyed]
        if not pieces:
            return None
        return np.mean([self.keyed[p] for p in pieces], axis=0)


def load_vectors(folder: str | Path) -> StaticVectors:
    folder = Path(folder)
    missing = [name for name in (VECTORS, TOKENIZER, SUMMARY) if not (folder / name).is_file()]
    if missing:
        raise ArmlmFileError(f"{folder} lacks {missing}: give the folder of a finished `armlm embeddings "
                                "method=...` run")
    return StaticVectors(folder, KeyedVectors.load(str(folder / VECTORS)),
                         (folder / TOKENIZER).read_text(encoding="utf-8"),
                         json.loads((folder / SUMMARY).read_text()))


def remove_partial(folder: Path) -> None:
    """Temporary folders a killed save left behind."""
    for leftover in folder.glob(".vectors-*"):
        shutil.rmtree(leftover, ignore_errors=True)
