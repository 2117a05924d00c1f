"""GloVe's weighting and loss against a direct computation, and its fit recovering a planted structure."""

import numpy as np
import pytest
import torch
from scipy import sparse

from armlm.embeddings.glove import Glove, train_glove, weighting


def test_weighting_is_the_papers_f():
    x = torch.tensor([0.0, 1.0, 50.0, 100.0, 1e4], dtype=torch.float64)
    expected = [0.0, (1 / 100) ** 0.75, 0.5 ** 0.75, 1.0, 1.0]
    assert torch.allclose(weighting(x), torch.tensor(expected, dtype=torch.float64))


def test_loss_equals_the_sum_over_entries_computed_one_by_one():
    model = Glove(size=5, dim=3, seed=0)
    rows, cols = torch.tensor([0, 1, 4, 2]), torch.tensor([1, 0, 3, 2])
    counts = torch.tensor([3.0, 3.0, 250.0, 0.5], dtype=torch.float64)
    direct = 0.0
    for i, j, x in zip(rows.tolist(), cols.tolist(), counts.tolist()):
        f = min(1.0, (x / 100) ** 0.75)
        with torch.no_grad():
            error = float(model.words[i] @ model.contexts[j] + model.word_bias[i] + model.context_bias[j]) - np.log(x)
        direct += 0.5 * f * error ** 2
    assert abs(float(model.loss(rows, cols, counts).detach()) - direct) < 1e-12


@pytest.mark.slow
def test_training_recovers_a_planted_low_rank_log_count_matrix():
    rng = np.random.default_rng(0)
    size, rank = 40, 3
    words, biases = rng.normal(size=(size, rank)), rng.normal(size=size)
    log_counts = words @ words.T + biases[:, None] + biases[None, :] + 3.0  # symmetric, rank 3 plus biases
    model, history = train_glove(sparse.coo_matrix(np.exp(log_counts)), dim=rank, epochs=400, seed=0, lr=0.2,
                                 batch_size=200)
    rows, cols = (torch.from_numpy(a.ravel()) for a in np.indices((size, size)))
    fitted = model.log_counts(rows, cols).detach().numpy().reshape(size, size)
    assert history[-1] < 0.01 * history[0]
    assert np.abs(fitted - log_counts).max() < 0.1 * np.abs(log_counts).std()  # every entry, not only on average
    assert model.vectors().shape == (size, rank)
