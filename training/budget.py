"""How many optimiser steps a run's budget takes, so the learning-rate schedule spans it.

A token budget fixes the steps exactly (every step feeds batch_size x block_size tokens per rank). A FLOPs
budget does not: an MLM's selected positions and masked diffusion's masked ones vary from batch to batch, and
with them the work of the last MLP and the vocabulary projection. Its steps are estimated from a few batches
run through the objective (`step_flops_estimate`); the run itself stops on the FLOPs it counted
(training.callbacks.TokenAccounting), not on that estimate.
"""

from __future__ import annotations

import math

import torch
from torch.utils.data import DataLoader

from armlm.common.errors import ArmlmError
from armlm.common.seeding import BUDGET_PROBE, derived_seed
from armlm.models.backbone import Transformer
from armlm.models.flops import TRAINING_PASSES
from armlm.objectives.base import Objective

PROBE_BATCHES = 8
# The step cap of a FLOPs budget sits this far past the estimated steps, so the FLOPs count, not the cap, ends
# the run; the schedule still spans the estimate (with PROBE_BATCHES batches its error is far inside the margin).
FLOPS_STEP_MARGIN = 1.1


def steps_for_tokens(max_tokens: int, tokens_per_step: int) -> int:
    return math.ceil(max_tokens / tokens_per_step)


def tokens_of_passes(passes: float, epoch_positions: int) -> int:
    """The input tokens of a budget in passes over the training data (data_epochs), as the loader gives them."""
    return round(float(passes) * epoch_positions)


def step_flops_estimate(objective: Objective, model: Transformer, loader: DataLoader, sequences_per_step: int,
                        seed: int, batches: int = PROBE_BATCHES) -> float:
    """Training FLOPs of one optimiser step of `sequences_per_step` sequences (all ranks, accumulation
    included), averaged over up to PROBE_BATCHES batches of `loader` (the validation batches: same blocks,
    same objective; training's data order is not touched). No gradients are taken."""
    flops, sequences = 0.0, 0
    generator = torch.Generator().manual_seed(derived_seed(seed, BUDGET_PROBE))
    with torch.no_grad():
        for index, batch in enumerate(loader):
            if index == batches:
                break
            flops += objective.loss(batch, model, generator).forward_flops
            sequences += batch["input_ids"].shape[0]
    if sequences == 0:
        raise ArmlmError("the validation split has no batch to estimate a step's FLOPs from; give the corpus a "
                         "validation split or budget by tokens (max_tokens=...)")
    return TRAINING_PASSES * flops / sequences * sequences_per_step
