"""Measure what MLM's independence assumption costs, for an AR or an MLM checkpoint.

    python evaluate.py checkpoint=outputs/mlm/<time> data=brown_enwiki pairs=200 candidates=50
    python evaluate.py -m checkpoint=outputs/study/ar,outputs/study/mlm data=brown_enwiki

See diagnostics/ and README.md ("Independence diagnostics").
"""

from __future__ import annotations

import logging

import hydra
from omegaconf import DictConfig

from common.cli import run_or_exit
from diagnostics.run import run_diagnostics

log = logging.getLogger("armlm.evaluate")


@hydra.main(version_base="1.3", config_path="configs", config_name="evaluate")
def main(cfg: DictConfig) -> None:
    run_or_exit(run_diagnostics, cfg, log)


if __name__ == "__main__":
    main()
