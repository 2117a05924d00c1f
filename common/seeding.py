"""Seeds derived from the run's seed and a position in training: every random draw of a training step is then
a function of the step alone, the same in an uninterrupted run and after a resume (tests/test_resume.py)."""

from __future__ import annotations

import numpy as np
import torch

# Independent streams of one run's randomness (BUDGET_PROBE: the batches a FLOPs budget estimates its steps from).
TRAIN_CORRUPTION, VAL_CORRUPTION, DROPOUT, BUDGET_PROBE = 0, 1, 2, 3


def derived_seed(*parts: int) -> int:
    """A 32-bit seed that depends on every part (numpy's SeedSequence mixes them; no collisions of a + b)."""
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(1)[0])


def seed_dropout(seed: int, epoch: int, batch_idx: int, rank: int) -> None:
    """Seed torch's global generator, which dropout draws from, for one training step. Without this a resumed
    run would draw other dropout masks than the uninterrupted one (the generator's state is not checkpointed)."""
    torch.manual_seed(derived_seed(seed, DROPOUT, epoch, batch_idx, rank))
