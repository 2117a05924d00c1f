"""The static methods, one class each, chosen by the `method` config group (`_target_`). Each trains on lists
of words and returns gensim KeyedVectors; every one draws its randomness from `seed`."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import numpy as np
from gensim.models import FastText, Word2Vec
from gensim.models.keyedvectors import KeyedVectors

from armlm.common.errors import ArmlmError
from armlm.common.rules import NUMBER, Rule, above, any_value, at_least, check_value
from armlm.embeddings.cooccurrence import cooccurrence, vocabulary
from armlm.embeddings.glove import train_glove
from armlm.embeddings.ppmi import ppmi, svd_vectors


class StaticMethod(ABC):
    """Settings shared by every method: vector size, symmetric window, and the minimum count for a word to
    get a vector (rarer words are dropped before windows are taken)."""

    def __init__(self, dim: int = 100, window: int = 5, min_count: int = 5) -> None:
        for key, value, least in (("dim", dim, 1), ("window", window, 1), ("min_count", min_count, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ArmlmError(f"method.{key}={value!r}; give an integer >= {least}")
        self.dim, self.window, self.min_count = dim, window, min_count

    @property
    def name(self) -> str:
        return type(self).__name__

    @abstractmethod
    def train(self, sentences: list[list[str]], seed: int) -> KeyedVectors: ...

    def settings(self) -> dict[str, Any]:
        return dict(vars(self))


def keyed(words: list[str], vectors: np.ndarray) -> KeyedVectors:
    kv = KeyedVectors(vector_size=vectors.shape[1])
    kv.add_vectors(words, vectors.astype(np.float32))
    return kv


class PpmiSvd(StaticMethod):
    """PPMI of window co-occurrences, reduced by truncated SVD (count-based; Levy et al. 2015)."""

    def __init__(self, context_smoothing: float = 0.75, eigen_power: float = 0.5, **common: Any) -> None:
        super().__init__(**common)
        check_value(Rule("method.context_smoothing", NUMBER, lambda v: 0 < v <= 1, "a number in (0, 1]"),
                    context_smoothing)
        check_value(Rule("method.eigen_power", NUMBER, at_least(0), "a number >= 0"), eigen_power)
        self.context_smoothing, self.eigen_power = float(context_smoothing), float(eigen_power)

    def train(self, sentences: list[list[str]], seed: int) -> KeyedVectors:
        words = vocabulary(sentences, self.min_count)
        matrix = ppmi(cooccurrence(sentences, words, self.window), self.context_smoothing)
        return keyed(words, svd_vectors(matrix, self.dim, seed, self.eigen_power))


class GloveMethod(StaticMethod):
    """GloVe on harmonically weighted window counts (embeddings.glove)."""

    def __init__(self, epochs: int = 25, lr: float = 0.05, x_max: float = 100.0, alpha: float = 0.75,
                 **common: Any) -> None:
        super().__init__(**common)
        check_value(Rule("method.epochs", (int,), at_least(1), "an integer >= 1"), epochs)
        for key, value in (("lr", lr), ("x_max", x_max), ("alpha", alpha)):  # a negative lr climbs the loss
            check_value(Rule(f"method.{key}", NUMBER, above(0), "a number > 0"), value)
        self.epochs, self.lr, self.x_max, self.alpha = int(epochs), float(lr), float(x_max), float(alpha)
        self.history: list[float] = []

    def train(self, sentences: list[list[str]], seed: int) -> KeyedVectors:
        words = vocabulary(sentences, self.min_count)
        counts = cooccurrence(sentences, words, self.window, weighting="harmonic")
        model, self.history = train_glove(counts, self.dim, self.epochs, seed, self.lr, self.x_max, self.alpha)
        return keyed(words, model.vectors())

    def settings(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if k != "history"}


class GensimMethod(StaticMethod):
    """word2vec (CBOW or skip-gram) and fastText through gensim, with negative sampling. One worker thread:
    gensim is only reproducible from its seed with one (its docs, `Word2Vec(seed=...)`)."""

    def __init__(self, skipgram: bool, negative: int = 5, epochs: int = 5, sample: float = 1e-3, **common: Any) -> None:
        super().__init__(**common)
        check_value(Rule("method.skipgram", (bool,), any_value, "true or false"), skipgram)
        # negative=0 with hs=0 gives word2vec no output layer to train: the vectors stay at their random start
        check_value(Rule("method.negative", (int,), at_least(1), "an integer >= 1"), negative)
        check_value(Rule("method.epochs", (int,), at_least(1), "an integer >= 1"), epochs)
        check_value(Rule("method.sample", NUMBER, at_least(0), "a number >= 0 (0: no down-sampling)"), sample)
        self.skipgram, self.negative = bool(skipgram), int(negative)
        self.epochs, self.sample = int(epochs), float(sample)

    def options(self, seed: int) -> dict[str, Any]:
        return {"vector_size": self.dim, "window": self.window, "min_count": self.min_count, "sg": int(self.skipgram),
                "hs": 0, "negative": self.negative, "epochs": self.epochs, "sample": self.sample, "seed": seed,
                "workers": 1}


class Word2VecMethod(GensimMethod):
    def train(self, sentences: list[list[str]], seed: int) -> KeyedVectors:
        return Word2Vec(sentences, **self.options(seed)).wv


class FastTextMethod(GensimMethod):
    """fastText: a word is the sum of its character n-grams' vectors (min_n..max_n), so an unseen word still
    gets a vector from the n-grams it shares with the training words (Bojanowski et al. 2017)."""

    def __init__(self, min_n: int = 3, max_n: int = 6, **settings: Any) -> None:
        super().__init__(**settings)
        check_value(Rule("method.min_n", (int,), at_least(1), "an integer >= 1"), min_n)
        check_value(Rule("method.max_n", (int,), at_least(min_n), f"an integer >= method.min_n={min_n}"), max_n)
        self.min_n, self.max_n = int(min_n), int(max_n)

    def train(self, sentences: list[list[str]], seed: int) -> KeyedVectors:
        return FastText(sentences, min_n=self.min_n, max_n=self.max_n, **self.options(seed)).wv
