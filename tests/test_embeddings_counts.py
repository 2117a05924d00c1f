"""Co-occurrence counts, PPMI and its SVD against direct computations on hand-made data."""

import math

import numpy as np
import pytest
from scipy import sparse

from armlm.embeddings.cooccurrence import cooccurrence, vocabulary
from armlm.embeddings.ppmi import ppmi, svd_vectors


def test_vocabulary_keeps_frequent_words_most_frequent_first():
    sentences = [["b", "a", "c"], ["a", "b", "a"], ["d"]]
    assert vocabulary(sentences, 2) == ["a", "b"]  # a: 3, b: 2; c and d once
    with pytest.raises(ValueError, match="lower min_count"):
        vocabulary(sentences, 4)


def test_window_counts_are_symmetric_stay_in_a_sentence_and_skip_dropped_words():
    sentences = [["a", "b", "rare", "c"], ["c", "a"]]
    counts = cooccurrence(sentences, ["a", "b", "c"], window=1).toarray()
    # "rare" is dropped first, so b and c become neighbours; no pair crosses the line break (c | c).
    expected = np.array([[0, 1, 1], [1, 0, 1], [1, 1, 0]], dtype=float)
    assert np.array_equal(counts, expected)
    harmonic = cooccurrence([["a", "b", "c"]], ["a", "b", "c"], window=2, weighting="harmonic").toarray()
    assert harmonic[0, 2] == harmonic[2, 0] == 0.5 and harmonic[0, 1] == 1.0
    with pytest.raises(ValueError, match="weighting"):
        cooccurrence(sentences, ["a"], window=1, weighting="gaussian")


def test_ppmi_matches_a_hand_computation():
    counts = np.array([[0, 4, 1], [4, 0, 2], [1, 2, 0]], dtype=float)
    total = counts.sum()
    p_word = counts.sum(1) / total
    p_context = counts.sum(0) / total
    expected = np.zeros_like(counts)
    for i in range(3):
        for j in range(3):
            if counts[i, j]:
                expected[i, j] = max(0.0, math.log(counts[i, j] / total / (p_word[i] * p_context[j])))
    assert np.allclose(ppmi(sparse.csr_matrix(counts)).toarray(), expected)
    assert (expected > 0).sum() < (counts > 0).sum()  # some pairs are negative PMI and clipped: the test can tell


def test_context_smoothing_applies_to_contexts_only_on_an_asymmetric_matrix():
    # Rows (words) and columns (contexts) have different marginals, so smoothing the wrong side is caught.
    counts = np.array([[0, 9, 1], [2, 0, 7], [1, 3, 0]], dtype=float)
    total = counts.sum()
    smoothed = np.power(counts.sum(0), 0.75)
    context = smoothed / smoothed.sum()
    word = counts.sum(1) / total
    expected = np.zeros_like(counts)
    for i, j in zip(*np.nonzero(counts)):
        expected[i, j] = max(0.0, math.log(counts[i, j] / total / (word[i] * context[j])))
    result = ppmi(sparse.csr_matrix(counts), context_smoothing=0.75).toarray()
    assert np.allclose(result, expected)
    swapped = np.power(counts.sum(1), 0.75)  # the word marginal smoothed instead: a different matrix
    wrong = np.zeros_like(counts)
    for i, j in zip(*np.nonzero(counts)):
        wrong[i, j] = max(0.0, math.log(counts[i, j] / total / (swapped[i] / swapped.sum() * counts[:, j].sum() / total)))
    assert not np.allclose(result, wrong)


def test_svd_vectors_reconstruct_a_symmetric_matrix_and_are_seeded():
    rng = np.random.default_rng(0)
    basis = rng.normal(size=(30, 4))
    matrix = basis @ basis.T  # PSD of rank 4: U S^0.5 (U S^0.5)^T gives it back
    vectors = svd_vectors(sparse.csr_matrix(matrix), dim=4, seed=1)
    assert np.allclose(vectors @ vectors.T, matrix, atol=1e-8)
    assert np.array_equal(vectors, svd_vectors(sparse.csr_matrix(matrix), dim=4, seed=1))
    with pytest.raises(ValueError, match="lower dim"):
        svd_vectors(sparse.csr_matrix(matrix), dim=30, seed=1)
