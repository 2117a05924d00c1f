"""Where armlm's configs and data are, for callers outside an `armlm <command>` launch (a study's in-process
stages, tests, notebooks, bench scripts): one place for the composition and the data folder every command's YAML
names."""

from __future__ import annotations

import os
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.initialize import get_gh_backup, restore_gh_from_backup
from omegaconf import DictConfig

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs"


def compose_config(name: str, overrides: list[str]) -> DictConfig:
    """configs/<name>.yaml with Hydra overrides, as `armlm <command> ...` would compose it; inside a running Hydra
    command too (its global state is set aside and restored: a study's in-process stages)."""
    backup = get_gh_backup()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
            return compose(name, overrides=list(overrides))
    finally:
        restore_gh_from_backup(backup)


def data_dir() -> Path:
    """$ARMLM_DATA_DIR, else ../shared/data beside the repository (the configs' `data_dir` default)."""
    return Path(os.environ.get("ARMLM_DATA_DIR", REPO.parent / "shared" / "data"))
