"""Sample text from a pretraining checkpoint: AR left to right, MLM and masked diffusion by iterative unmasking.

    python generate.py checkpoint=outputs/ar/<time> prompt="The river" new_tokens=24 samples=3
    python generate.py checkpoint=outputs/masked_diffusion/<time> prompt="The river" steps=12 order=confidence
"""

from __future__ import annotations

import logging

import hydra
from omegaconf import DictConfig

from common.cli import run_or_exit
from generation.run import run_generation

log = logging.getLogger("armlm.generate")


@hydra.main(version_base="1.3", config_path="configs", config_name="generate")
def main(cfg: DictConfig) -> None:
    run_or_exit(run_generation, cfg, log)


if __name__ == "__main__":
    main()
