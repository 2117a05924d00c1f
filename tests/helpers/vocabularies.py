"""Vocabularies and tokenizers small enough to build in every test: a Vocabulary with armlm's special ids and
skewed unigram counts, and a word-level tokenizer over a given word list."""

from __future__ import annotations

import numpy as np
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

from armlm.common.vocabulary import SPECIAL_TOKENS, Vocabulary


def make_vocabulary(size: int = 50, seed: int = 0) -> Vocabulary:
    """Special ids 0..5 and a skewed unigram distribution over the ordinary tokens."""
    counts = np.random.default_rng(seed).integers(1, 1000, size=size).astype(np.int64)
    counts[:6] = [0, 3, 100, 100, 0, 50]
    return Vocabulary(size, 0, 1, 2, 3, 4, 5, unigram_counts=counts)


def word_tokenizer_json(words: list[str]) -> str:
    """A WordLevel tokenizer with armlm's special tokens first, and 2-piece words for long ones via [UNK]."""
    vocab = {t: i for i, t in enumerate([*SPECIAL_TOKENS, *sorted(set(words))])}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    return tokenizer.to_str()
