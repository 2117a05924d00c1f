"""Where armlm's configs and data are, for callers outside a `python <command>.py` launch (studies' tests,
notebooks, bench scripts): one place for the composition and the data folder that every command's YAML names."""

from __future__ import annotations

import os
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs"


def compose_config(name: str, overrides: list[str]) -> DictConfig:
    """configs/<name>.yaml with Hydra overrides, as `python <name>.py ...` would compose it."""
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return compose(name, overrides=list(overrides))


def data_dir() -> Path:
    """$ARMLM_DATA_DIR, else ../shared/data beside the repository (the configs' `data_dir` default)."""
    return Path(os.environ.get("ARMLM_DATA_DIR", REPO.parent / "shared" / "data"))
