"""Configs the tests compose as the commands compose them: each distinct override list once per worker
(composed_config), a pretraining run of seconds (tiny_config), a fine-tuning run's quick settings (finetune_config),
a task's config (task_config) and the reader specification it gives (glue_task)."""

from __future__ import annotations

import copy
import functools
from collections.abc import Sequence
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

from armlm.common.config import compose_config
from armlm.datamodules.glue import GlueTask

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "configs"


# A pretraining run of seconds: tiny model, small vocabulary, 8 steps on the embedded corpus (also given to
# `python train.py` on a command line, with data.cache_dir= and hydra.run.dir=)
TINY_OVERRIDES = (
    "model=tiny", "data.block_size=32", "data.batch_size=8", "data.tokenizer.vocab_size=600",
    "trainer.max_steps=8", "trainer.val_check_interval=4", "trainer.limit_val_batches=2",
    "trainer.log_every_n_steps=2", "trainer.enable_progress_bar=false", "max_tokens=null",
    "trainer.precision=32-true",
)


@functools.lru_cache(maxsize=None)
def _composed(name: str, overrides: tuple[str, ...]) -> DictConfig:
    return compose_config(name, list(overrides))


def composed_config(name: str, overrides: Sequence[str], **settings: object) -> DictConfig:
    """configs/<name>.yaml with the overrides, composed once per worker for each distinct list (a composition costs
    about a tenth of a second, and the suite composes the same lists hundreds of times), as a fresh copy; then the
    plain settings (dotted keys, here the run's paths, which differ from test to test) set on it."""
    cfg = copy.deepcopy(_composed(name, tuple(overrides)))
    for key, value in settings.items():
        OmegaConf.update(cfg, key, value)
    return cfg


def study_config(*overrides: str) -> DictConfig:
    """configs/study.yaml with the overrides (composed_config), as `armlm study` would compose them."""
    return composed_config("study", overrides)


def tiny_config(out: Path, cache: Path, *overrides: str) -> DictConfig:
    """A pretraining config of seconds (TINY_OVERRIDES) writing to `out`."""
    return composed_config("train", [*TINY_OVERRIDES, *overrides], **{"data.cache_dir": str(cache),
                                                                       "output_dir": str(out)})


# A fine-tuning run's quick settings (finetune_config): no progress bar, full precision, small batches
QUICK = ["trainer.enable_progress_bar=false", "trainer.precision=32-true", "trainer.log_every_n_steps=2",
         "task.data.batch_size=16"]


def finetune_config(out: Path, *overrides: str) -> DictConfig:
    """A fine-tuning config (QUICK settings) writing to `out`."""
    return composed_config("finetune", [*QUICK, *overrides], output_dir=str(out))


def task_config(name: str, *overrides: str) -> DictConfig:
    """The fine-tuning config with task=<name>, composed as `armlm finetune task=<name>` composes it."""
    return composed_config("finetune", [f"task={name}", "pretrained=x", *overrides])


@functools.cache
def glue_task(name: str) -> GlueTask:
    """The reader specification configs/task/<name>.yaml gives (what GlueDataModule reads the files with)."""
    cfg = task_config(name)
    return GlueTask.from_config(cfg.task.name, cfg.task.data)


def hydra_config(name: str, out: Path, *overrides: str) -> DictConfig:
    """configs/<name>.yaml composed afresh through Hydra (not cached), writing to `out`."""
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return compose(name, overrides=[f"output_dir={out}", *overrides])
