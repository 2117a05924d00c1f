"""Held-out sentences and the position pairs the diagnostics score.

Sentences come from a pretraining corpus' validation documents, so a checkpoint is measured on text of the
kind it was trained on but never saw. Each is encoded as `[CLS] w_1 .. w_T`, the way every pretraining
block begins, for AR and MLM alike.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from tokenizers import Tokenizer
from tqdm import tqdm

from armlm.common.errors import ArmlmError
from armlm.common.vocabulary import CLS, SPECIAL_TOKENS
from armlm.datamodules.corpora import Corpus
from armlm.datamodules.encoding import token_id

# A sentence ends at . ! or ? followed by space and something that can start a sentence. Brown has one
# sentence per line already; Wikipedia paragraphs need the split.
SENTENCE_BOUNDARY = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])")

PairKind = Literal["contiguous", "random"]
PAIR_KINDS: tuple[PairKind, ...] = ("contiguous", "random")


def split_sentences(document: str) -> list[str]:
    return [s for line in document.splitlines() for s in SENTENCE_BOUNDARY.split(line.strip()) if s]


def special_token_ids(tokenizer: Tokenizer) -> list[int]:
    return [token_id(tokenizer, token) for token in SPECIAL_TOKENS]


def load_sentences(corpus: Corpus, tokenizer: Tokenizer, *, min_tokens: int, max_tokens: int,
                   split: str = "validation") -> list[list[int]]:
    """Token ids (`[CLS]` first) of every sentence of the split with `min_tokens`..`max_tokens` subwords,
    none of them special (an [UNK] would be a position no construction can score honestly)."""
    return [ids for _, ids in sentence_texts(corpus, tokenizer, min_tokens=min_tokens, max_tokens=max_tokens,
                                             split=split)]


def sentence_texts(corpus: Corpus, tokenizer: Tokenizer, *, min_tokens: int, max_tokens: int,
                   split: str = "validation", start: int | None = None,
                   specials: Sequence[int] | None = None) -> list[tuple[str, list[int]]]:
    """`load_sentences` with each sentence's text beside its ids. `start` and `specials`: another tokenizer's start
    token and special ids (sources.SpecialTokens); default armlm's [CLS] and special tokens."""
    if not 2 <= min_tokens <= max_tokens:
        raise ArmlmError(f"sentences.min_tokens={min_tokens}, max_tokens={max_tokens}: need 2 <= min <= max")
    documents = corpus.load().get(split)
    if documents is None:
        raise ArmlmError(f"split={split!r}; the corpus has 'train' and 'validation'")
    cls_id = token_id(tokenizer, CLS) if start is None else start
    special = set(special_token_ids(tokenizer) if specials is None else specials)
    sentences, in_length = [], 0
    for document in tqdm(documents, desc=f"tokenizing {split} sentences", unit="doc"):
        for text in split_sentences(document):
            ids = tokenizer.encode(text, add_special_tokens=False).ids
            if min_tokens <= len(ids) <= max_tokens:
                in_length += 1
                if not special.intersection(ids):  # an [UNK] (or another special token) inside the text: left out
                    sentences.append((text, [cls_id, *ids]))
    if not sentences:
        if in_length:  # the length filter kept some: the special-token filter emptied the set, so say that
            raise ArmlmError(f"every one of the {in_length} {split} sentences of {corpus.describe()} with "
                             f"{min_tokens}-{max_tokens} tokens holds a special token ([UNK] where the tokenizer "
                             "lacks a word); use a corpus this tokenizer covers, or the model's own tokenizer")
        raise ArmlmError(f"no {split} sentence of {corpus.describe()} has {min_tokens}-{max_tokens} tokens; "
                         "lower sentences.min_tokens or raise sentences.max_tokens")
    return sentences


@dataclass(frozen=True)
class Pair:
    sentence: int  # index into the sentence list
    i: int  # token positions, i < j, never [CLS]
    j: int
    kind: PairKind

    @property
    def distance(self) -> int:
        return self.j - self.i


def check_pair_count(n: int) -> None:
    """`pairs=`: at least one (evaluate's settings check asks this before any corpus is read, sample_pairs again)."""
    if n < 1:
        raise ArmlmError(f"pairs={n}; ask for at least one pair")


def sample_pairs(sentences: list[list[int]], n: int, kind: PairKind, seed: int) -> list[Pair]:
    """One pair from each of `n` sentences drawn without replacement. Contiguous pairs are (t, t+1),
    random pairs two distinct positions, uniformly. The same seed draws the same sentences for both kinds
    (the pairs differ), so the two tables describe the same text."""
    if kind not in PAIR_KINDS:
        raise ArmlmError(f"pair kind {kind!r}; choose one of {PAIR_KINDS}")
    check_pair_count(n)
    if n > len(sentences):
        raise ArmlmError(f"pairs={n} but only {len(sentences)} sentences qualify; lower pairs or widen "
                         "sentences.min_tokens / max_tokens")
    chosen = np.random.default_rng(seed).permutation(len(sentences))[:n]
    rng = np.random.default_rng([seed, PAIR_KINDS.index(kind)])
    pairs = []
    for index in chosen:
        length = len(sentences[index]) - 1  # ordinary tokens sit at positions 1..length
        if kind == "contiguous":
            i = int(rng.integers(1, length))
            pairs.append(Pair(int(index), i, i + 1, kind))
        else:
            i, j = sorted(int(p) for p in rng.choice(np.arange(1, length + 1), size=2, replace=False))
            pairs.append(Pair(int(index), i, j, kind))
    return pairs
