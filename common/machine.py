"""Facts about the machine a process runs on, which a run's speed and numerics depend on: training chooses its CPU
precision by them (training.setup) and a study's record keeps them beside each unit (studies.keeping); and whether
the device a command names is here (imported by commands that start without Lightning, so it imports torch alone)."""

from __future__ import annotations

import platform
from pathlib import Path

import torch

from armlm.common.errors import ArmlmError

CPUINFO = Path("/proc/cpuinfo")


def cpu_has_bf16_units() -> bool:
    """AVX512-BF16 or AMX: bf16 matrix products run natively, faster than fp32 (docs/results/recipe.md, "Default runs")."""
    try:
        flags = CPUINFO.read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def cpu_model() -> str:
    try:
        lines = CPUINFO.read_text().splitlines()
    except OSError:
        return platform.processor() or platform.machine()
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), platform.machine())


def device_present(kind: str) -> bool:
    """Whether torch sees a device of this kind here (Lightning's `gpu`: CUDA or Apple's MPS); a kind it does not
    name (cpu, auto, ...) is left to whoever reads it."""
    present = {"cuda": torch.cuda.is_available(), "mps": torch.backends.mps.is_available()}
    present["gpu"] = present["cuda"] or present["mps"]
    return present.get(kind.lower(), True)


def missing_device(name: str) -> str | None:
    """What this machine lacks of the device `name` (cpu, cuda, cuda:1, mps), said as torch sees it; None where it is
    here, its index too. A name torch does not parse is an ArmlmError naming the kinds it takes."""
    try:
        device = torch.device(name)
    except RuntimeError as err:
        raise ArmlmError(f"device={name} is not a device torch names ({str(err).splitlines()[0]}); give device=cpu "
                         "or device=cuda") from None
    count = torch.cuda.device_count() if device.type == "cuda" and device_present("cuda") else 0
    if device_present(device.type) and not (device.type == "cuda" and (device.index or 0) >= count):
        return None
    seen = f"{count} cuda device{'s' * (count != 1)}" if count else f"no {device.type} device"
    return f"torch {torch.__version__} sees {seen} on this machine"


def check_device(name: str) -> None:
    """The device= of a command that reads a model without a Trainer (zeroshot, evaluate, generate): here, before
    the model is read, as check_accelerator is for the runs that build one."""
    lacking = missing_device(name)
    if lacking:
        raise ArmlmError(f"device={name}: {lacking}; give device=cpu (the default)")
