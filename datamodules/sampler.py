"""The training sampler: seeded per epoch, and able to start an epoch part-way through after a resume."""

from __future__ import annotations

import math
from collections.abc import Iterator

from torch.utils.data import Dataset, DistributedSampler

from armlm.common.errors import ArmlmError


def rank_batches(examples: int, batch_size: int, world_size: int) -> int:
    """Full batches each rank's loader cuts from one epoch of `examples`: DistributedSampler pads to equal shares
    (ceil(examples / world_size) each), and the loader drops a rank's last partial batch."""
    return math.ceil(examples / world_size) // batch_size


class ResumableSampler(DistributedSampler):
    """DistributedSampler (one seeded permutation per epoch, split across ranks) that can skip the start of one
    epoch: the examples a checkpointed run had already trained on before it was interrupted.

    Lightning restarts a mid-epoch checkpoint at the right batch index but, with a plain sampler, feeds the
    epoch's batches from the first one again: replayed data, and MLM masks drawn for other batches. After
    `resume_at(epoch, n)`, iterating that epoch yields its indices from the n-th (per rank) on. `len()` stays the
    full epoch, which is what Lightning's restored batch counter counts against."""

    def __init__(self, dataset: Dataset, *, num_replicas: int, rank: int, seed: int) -> None:
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=True, seed=seed)
        self._resume: tuple[int, int] | None = None

    def resume_at(self, epoch: int, examples_done: int) -> None:
        if examples_done < 0:
            raise ArmlmError(f"examples_done={examples_done} must be >= 0")
        self._resume = (epoch, examples_done)

    def __iter__(self) -> Iterator[int]:
        indices = list(super().__iter__())
        if self._resume is not None:
            epoch, done = self._resume
            if epoch == self.epoch:
                return iter(indices[done:])
            if self.epoch > epoch:
                self._resume = None  # that epoch is over; later ones start from their beginning
        return iter(indices)
