"""The trainer group's `step` settings: how armlm runs a training step on a machine (compile, fused AdamW, the SDPA
kernels, the loader). Apart from the Trainer's own module (training.trainer), so that the checks a command makes
before its run (training.preflight) read them without importing Lightning."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from torch.nn.attention import SDPBackend, sdpa_kernel

from armlm.common.errors import ArmlmError


def step_settings(trainer: DictConfig) -> dict[str, Any]:
    """The trainer group's `step` settings (how armlm runs a pretraining step there): configs/trainer/cpu.yaml holds
    every one, and each trainer config starts from it."""
    if trainer.get("step") is None:
        raise ArmlmError("the trainer config has no `step` settings: start it from configs/trainer/cpu.yaml "
                         "(defaults: [cpu, _self_]), as trainer=gpu and trainer=ddp do")
    return OmegaConf.to_container(trainer.step, resolve=True)


def use_matmul_precision(trainer: DictConfig) -> None:
    """torch.set_float32_matmul_precision(trainer.step.matmul_precision). The setting is the process's: every run sets
    its own, or a study's in-process stage would run at the precision of the stage before it."""
    torch.set_float32_matmul_precision(step_settings(trainer)["matmul_precision"])


# trainer.step.sdpa_backends' names for torch's SDPA kernels
SDPA_BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
                 "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}


def sdpa_backends(trainer: DictConfig) -> list[SDPBackend] | None:
    """trainer.step.sdpa_backends as torch's SDPBackend values (None: torch's choice), checked."""
    names = step_settings(trainer).get("sdpa_backends")
    if names is None:
        return None
    if not isinstance(names, list) or not names or set(names) - set(SDPA_BACKENDS):
        raise ArmlmError(f"trainer.step.sdpa_backends={list(names)}; choose some of {list(SDPA_BACKENDS)} "
                         "(null: torch's choice)")
    return [SDPA_BACKENDS[name] for name in names]


@contextlib.contextmanager
def attention_kernels(trainer: DictConfig) -> Iterator[None]:
    """Training (and its validation) with only the SDPA kernels trainer.step.sdpa_backends names; null: torch's
    choice. The flags are torch's global ones, read when a step is traced or dispatched, and restored on leaving.
    trainer=gpu leaves cuDNN's out until a lease proves its backward (docs/results/gpu.md)."""
    backends = sdpa_backends(trainer)
    if backends is None:
        yield
        return
    with sdpa_kernel(backends):
        yield
