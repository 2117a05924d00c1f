"""Where armlm's configs, data and checkout are, for callers outside an `armlm <command>` launch (a study's in-process
stages, tests, notebooks, bench scripts): one place for the composition and the data folder every command's YAML
names.

The configs are package data (armlm.configs), so an installed wheel finds them as a checkout does. A checkout is
what a clone adds beyond the package (train.py, bench/, records/, git history): CHECKOUT is None where armlm was
installed from a wheel."""

from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.initialize import get_gh_backup, restore_gh_from_backup
from omegaconf import DictConfig

CONFIGS = Path(str(files("armlm.configs")))  # a folder on disk, installed or editable (setuptools' package-dir)
_ROOT = Path(__file__).resolve().parents[1]  # the checkout under an editable install; site-packages/armlm installed
CHECKOUT: Path | None = _ROOT if (_ROOT / "pyproject.toml").is_file() and (_ROOT / "train.py").is_file() else None


def compose_config(name: str, overrides: list[str], with_hydra: bool = False) -> DictConfig:
    """configs/<name>.yaml with Hydra overrides, as `armlm <command> ...` would compose it; inside a running Hydra
    command too (its global state is set aside and restored: a study's in-process stages). with_hydra: with Hydra's
    own node (`hydra.runtime.choices`: the option of each config group, a search path's groups included)."""
    export_data_dir()
    backup = get_gh_backup()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
            return compose(name, overrides=list(overrides), return_hydra_config=with_hydra)
    finally:
        restore_gh_from_backup(backup)


def data_dir() -> Path:
    """$ARMLM_DATA_DIR, else ../shared/data beside the checkout, or beside the working folder where armlm is installed
    (the configs' `data_dir`, through export_data_dir)."""
    beside = CHECKOUT if CHECKOUT is not None else Path.cwd()
    return Path(os.environ.get("ARMLM_DATA_DIR", beside.parent / "shared" / "data"))


def export_data_dir() -> None:
    """Set $ARMLM_DATA_DIR, where it is unset, to data_dir(), which the configs' `data_dir`
    (`${oc.env:ARMLM_DATA_DIR,...}`) then reads: from a checkout, the data beside it whatever the working folder (the
    configs' own fallback is relative to it); the stages and ranks a command starts inherit the same folder."""
    os.environ.setdefault("ARMLM_DATA_DIR", str(data_dir()))
