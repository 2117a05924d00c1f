"""Pretraining objectives. Hydra's `objective` config group is the registry: each config names its class."""

from armlm.objectives.ar import AutoregressiveLM
from armlm.objectives.base import LossOutput, Objective
from armlm.objectives.mlm import MaskedLM
from armlm.objectives.mlm_nsp import MaskedLMWithNSP

__all__ = ["AutoregressiveLM", "LossOutput", "MaskedLM", "MaskedLMWithNSP", "Objective"]
