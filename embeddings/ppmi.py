"""Positive pointwise mutual information and its truncated SVD (Levy, Goldberg & Dagan 2015's settings:
context-distribution smoothing and eigenvalue weighting)."""

from __future__ import annotations

import numpy as np
from scipy import sparse
from scipy.sparse.linalg import svds

from armlm.common.errors import ArmlmError


def ppmi(counts: sparse.spmatrix, context_smoothing: float = 1.0) -> sparse.csr_matrix:
    """PPMI(w, c) = max(0, log P(w, c) / (P(w) P_a(c))), with P_a(c) proportional to count(c)^a
    (`context_smoothing`; 1 is plain PMI, 0.75 raises rare contexts' probability as word2vec's sampling does).
    Only observed pairs can be positive, so the result keeps the counts' sparsity."""
    counts = sparse.coo_matrix(counts, dtype=np.float64)
    total = counts.sum()
    if total <= 0:
        raise ArmlmError("the co-occurrence matrix is empty: the corpus has no word pairs inside the window")
    word_p = np.asarray(counts.sum(axis=1)).ravel() / total
    context_counts = np.asarray(counts.sum(axis=0)).ravel() ** context_smoothing
    context_p = context_counts / context_counts.sum()
    pmi = np.log(counts.data / total) - np.log(word_p[counts.row]) - np.log(context_p[counts.col])
    positive = pmi > 0
    return sparse.csr_matrix((pmi[positive], (counts.row[positive], counts.col[positive])), shape=counts.shape)


def svd_vectors(matrix: sparse.spmatrix, dim: int, seed: int, eigen_power: float = 0.5) -> np.ndarray:
    """U_d Σ_d^p, the rows of the rank-`dim` SVD (p = 0.5: Levy et al.'s symmetric weighting). Deterministic:
    ARPACK starts from a seeded vector, and each singular vector's sign is fixed (largest entry positive)."""
    size = min(matrix.shape)
    if not 0 < dim < size:
        raise ArmlmError(f"dim={dim} needs a vocabulary of more than {dim} words (the corpus gives {size}); lower "
                         "dim or min_count")
    start = np.random.default_rng(seed).standard_normal(size)
    u, s, _ = svds(sparse.csr_matrix(matrix, dtype=np.float64), k=dim, v0=start)
    order = np.argsort(-s)  # svds returns ascending singular values
    u, s = u[:, order], s[order]
    signs = np.sign(u[np.abs(u).argmax(axis=0), np.arange(dim)])
    return (u * signs) * s ** eigen_power
