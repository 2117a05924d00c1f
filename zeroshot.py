"""Score a pretraining checkpoint zero-shot on BLiMP's minimal pairs, by every method its objective has.

    python zeroshot.py checkpoint=outputs/mlm/<time>                  # pll, pll_word_l2r and bound
    python zeroshot.py checkpoint=outputs/ar/<time> blimp.dir=/data/blimp/data

See zeroshot/ and README.md ("Zero-shot scoring").
"""

from __future__ import annotations

import logging

import hydra
from omegaconf import DictConfig

from common.cli import run_or_exit
from zeroshot.run import run_zeroshot

log = logging.getLogger("armlm.zeroshot")


@hydra.main(version_base="1.3", config_path="configs", config_name="zeroshot")
def main(cfg: DictConfig) -> None:
    run_or_exit(run_zeroshot, cfg, log)


if __name__ == "__main__":
    main()
