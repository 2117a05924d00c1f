"""Whether the device a command or run names is on this machine, as torch sees it: imported by commands that start
without Lightning (zeroshot, evaluate, generate), so it imports torch alone."""

from __future__ import annotations

import torch

from armlm.common.errors import ArmlmError


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


def check_device(name: str, fix: str = "give device=cpu (the default)") -> None:
    """The device= of a command that reads a model without a Trainer (zeroshot, evaluate, generate, lm-eval's armlm
    model): here, before the model is read, as check_accelerator is for the runs that build one; `fix`: how that
    command's line asks for the CPU."""
    lacking = missing_device(name)
    if lacking:
        raise ArmlmError(f"device={name}: {lacking}; {fix}")
