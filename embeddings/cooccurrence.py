"""Word-context co-occurrence counts within a symmetric window, the input of PPMI and GloVe."""

from __future__ import annotations

from collections import Counter

import numpy as np
from scipy import sparse

from armlm.common.errors import ArmlmError

WEIGHTINGS = ("uniform", "harmonic")  # harmonic: a context d words away counts 1/d (GloVe's choice)


def vocabulary(sentences: list[list[str]], min_count: int) -> list[str]:
    """Words seen at least `min_count` times, most frequent first (ties alphabetical: the order is fixed)."""
    counts = Counter(word for sentence in sentences for word in sentence)
    kept = [w for w, n in counts.items() if n >= min_count]
    if not kept:
        raise ArmlmError(f"no word occurs {min_count} times in the corpus; lower min_count")
    return sorted(kept, key=lambda w: (-counts[w], w))


def cooccurrence(sentences: list[list[str]], words: list[str], window: int,
                 weighting: str = "uniform") -> sparse.csr_matrix:
    """(V, V) symmetric counts: X[i, j] sums the weights of j within `window` words of i in one sentence.
    Words outside `words` are dropped before the window is applied (word2vec's behaviour for rare words), so
    they take no slot in it."""
    if weighting not in WEIGHTINGS:
        raise ArmlmError(f"weighting={weighting!r}; choose one of {WEIGHTINGS}")
    if window < 1:
        raise ArmlmError(f"window={window}; give at least 1")
    index = {w: i for i, w in enumerate(words)}
    ids, sentence_of = [], []
    for k, sentence in enumerate(sentences):
        kept = [index[w] for w in sentence if w in index]
        ids += kept
        sentence_of += [k] * len(kept)
    ids_array, sentence_array = np.asarray(ids, dtype=np.int64), np.asarray(sentence_of, dtype=np.int64)
    rows, cols, values = [], [], []
    for distance in range(1, window + 1):
        same = sentence_array[:-distance] == sentence_array[distance:]
        left, right = ids_array[:-distance][same], ids_array[distance:][same]
        weight = 1.0 / distance if weighting == "harmonic" else 1.0
        rows += [left, right]  # both directions: the window is symmetric
        cols += [right, left]
        values.append(np.full(2 * len(left), weight))
    size = len(words)
    if not rows or sum(len(r) for r in rows) == 0:
        return sparse.csr_matrix((size, size))
    matrix = sparse.coo_matrix((np.concatenate(values), (np.concatenate(rows), np.concatenate(cols))),
                               shape=(size, size))
    return matrix.tocsr()  # duplicates are summed
