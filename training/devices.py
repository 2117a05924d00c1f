"""What a run asks of this machine: the devices its trainer config names (whether they are here, and how many
processes the run is) and its loggers' credentials, checked before any data is read."""

from __future__ import annotations

import logging

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig

from armlm.common.devices import device_present
from armlm.common.errors import ArmlmError
from armlm.training.loggers import check_loggers
from armlm.training.trainer import RANK_ZERO_LOGGERS, lightning_settings


def check_accelerator(trainer: DictConfig) -> None:
    """The GPU that trainer=gpu, ddp and fsdp ask for is on this machine (Lightning's `gpu` is CUDA, else Apple's
    MPS): a property of the machine, not of the config (a study's GPU presets compose and check on a CPU), so a run
    checks it beside its config, before any data is read."""
    accelerator = str(trainer.get("accelerator")).lower()
    if not device_present(accelerator):
        raise ArmlmError(f"trainer.accelerator={accelerator} (trainer=gpu, ddp and fsdp ask for a GPU), but torch "
                         f"{torch.__version__} sees none; on this machine leave trainer=cpu (the default) or add "
                         "trainer.accelerator=cpu")


def check_machine(cfg: DictConfig) -> None:
    """What a run that builds a Trainer (pretraining, fine-tuning from a checkpoint or from static vectors) asks of this
    machine and session: its accelerator is here, and each logger that needs credentials finds them."""
    check_accelerator(cfg.trainer)
    check_loggers(cfg.get("logger"))


def world_size(cfg: DictConfig) -> int:
    """How many processes a run of this config is: its trainer group's devices and nodes as Lightning resolves them
    on this machine ('auto' and -1 counted here), from a Trainer that is built, silently, and never run."""
    check_accelerator(cfg.trainer)
    loggers = [logging.getLogger(name) for name in RANK_ZERO_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.WARNING)
    try:
        return instantiate(lightning_settings(cfg.trainer), logger=False, enable_checkpointing=False,
                           enable_progress_bar=False).world_size
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)
