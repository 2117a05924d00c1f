"""Pretraining objectives. Hydra's `objective` config group is the registry: each config names its class."""

from objectives.ar import AutoregressiveLM
from objectives.base import LossOutput, Objective
from objectives.mlm import MaskedLM
from objectives.mlm_nsp import MaskedLMWithNSP

__all__ = ["AutoregressiveLM", "LossOutput", "MaskedLM", "MaskedLMWithNSP", "Objective"]
