"""A benchmark contestant: one model's training and inference steps as closures, and how they are timed.

Timing synchronises the device before and after, so a GPU's queued kernels are counted in the step they belong to.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor, nn

from bench.flops import synchronize

Step = Callable[[], None]


@dataclass
class Contestant:
    name: str
    objective: str  # its objective config's name; a Hugging Face model carries the armlm objective it is timed against
    train: Step
    infer: Step
    forward_flops_per_token: float


def precision_context(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def training_step(module: nn.Module, loss_of_batch: Callable[[], Tensor], optimizer: torch.optim.Optimizer,
                  autocast: Callable[[], contextlib.AbstractContextManager]) -> Step:
    def step() -> None:
        module.train()
        with autocast():
            loss = loss_of_batch()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def inference_step(module: nn.Module, loss_of_batch: Callable[[], Tensor],
                   autocast: Callable[[], contextlib.AbstractContextManager]) -> Step:
    def step() -> None:
        module.eval()
        with torch.inference_mode(), autocast():
            loss_of_batch()

    return step


def timed(step: Step, steps: int, device: torch.device) -> float:
    synchronize(device)
    started = time.perf_counter()
    for _ in range(steps):
        step()
    synchronize(device)
    return time.perf_counter() - started


def summarise(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}
