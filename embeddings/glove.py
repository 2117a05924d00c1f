"""GloVe (Pennington, Socher & Manning 2014): weighted least squares on log co-occurrences,

    J = sum_ij f(X_ij) (w_i . w~_j + b_i + b~_j - log X_ij)^2,   f(x) = min(1, (x / x_max)^alpha),

fitted with AdaGrad over the non-zero entries, as the reference glove.c does (half the squared error per entry,
vectors W + W~ at the end). glove.c scales the gradient by its step eta = 0.05 *before* accumulating its square
(accumulators start at 1), so its update is g / sqrt(1/eta^2 + sum g^2): torch's Adagrad with lr 1 and an initial
accumulator of 1/eta^2. No maintained GloVe package installs here
(glove-python-binary has no wheel for this Python, glove_python 0.1.0 is a 2016 Cython sdist, mittens fits dense
V x V matrices), so this is the paper's loss in a few lines of torch."""

from __future__ import annotations

import numpy as np
import torch
from scipy import sparse
from torch import Tensor, nn
from tqdm.auto import tqdm

from armlm.common.errors import ArmlmError


def weighting(x: Tensor, x_max: float = 100.0, alpha: float = 0.75) -> Tensor:
    """f(x): (x / x_max)^alpha below x_max, 1 above; f(0) = 0, so unseen pairs carry no weight."""
    return torch.clamp(x / x_max, max=1.0) ** alpha


class Glove(nn.Module):
    def __init__(self, size: int, dim: int, seed: int) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(seed)

        def uniform(*shape: int) -> nn.Parameter:  # glove.c: uniform in (-0.5, 0.5) / dim
            return nn.Parameter((torch.rand(*shape, generator=generator, dtype=torch.float64) - 0.5) / dim)

        self.words, self.contexts = uniform(size, dim), uniform(size, dim)
        self.word_bias, self.context_bias = uniform(size), uniform(size)

    def log_counts(self, rows: Tensor, cols: Tensor) -> Tensor:
        """The model's log X_ij: w_i . w~_j + b_i + b~_j."""
        return (self.words[rows] * self.contexts[cols]).sum(-1) + self.word_bias[rows] + self.context_bias[cols]

    def loss(self, rows: Tensor, cols: Tensor, counts: Tensor, x_max: float = 100.0, alpha: float = 0.75) -> Tensor:
        """Half of J over the given entries (glove.c's cost: its gradient is f * error)."""
        error = self.log_counts(rows, cols) - torch.log(counts)
        return 0.5 * (weighting(counts, x_max, alpha) * error ** 2).sum()

    def vectors(self) -> np.ndarray:
        return (self.words + self.contexts).detach().numpy()  # the paper's W + W~


def train_glove(counts: sparse.spmatrix, dim: int, epochs: int, seed: int, lr: float = 0.05, x_max: float = 100.0,
                alpha: float = 0.75, batch_size: int = 4096) -> tuple[Glove, list[float]]:
    """The fitted model (its `vectors()` are the paper's W + W~) and the mean half-cost per entry of each epoch.
    `lr` is glove.c's eta. Entries are visited in a seeded shuffled order, `batch_size` at a time; a dense AdaGrad
    step leaves the rows a batch did not touch unchanged (their gradient is zero), but a row met several times in
    one batch takes one summed step where glove.c takes several."""
    counts = sparse.coo_matrix(counts)
    if counts.nnz == 0:
        raise ArmlmError("the co-occurrence matrix is empty: the corpus has no word pairs inside the window")
    rows, cols = torch.from_numpy(counts.row.astype(np.int64)), torch.from_numpy(counts.col.astype(np.int64))
    values = torch.from_numpy(counts.data.astype(np.float64))
    model = Glove(counts.shape[0], dim, seed)
    optimizer = torch.optim.Adagrad(model.parameters(), lr=1.0, initial_accumulator_value=1.0 / lr ** 2)
    generator = torch.Generator().manual_seed(seed + 1)
    history = []
    for _ in tqdm(range(epochs), desc="glove epochs", leave=False):
        order, total = torch.randperm(counts.nnz, generator=generator), 0.0
        for start in range(0, counts.nnz, batch_size):
            batch = order[start:start + batch_size]
            optimizer.zero_grad(set_to_none=True)
            loss = model.loss(rows[batch], cols[batch], values[batch], x_max, alpha)
            loss.backward()
            optimizer.step()
            total += float(loss.detach())
        history.append(total / counts.nnz)
    return model, history
