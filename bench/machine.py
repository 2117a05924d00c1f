"""What a benchmark asks of the machine before it starts: the device it was given is here."""

from __future__ import annotations

import torch

from armlm.training.devices import device_present


def require_device(name: str, fix: str, given: str | None = None) -> torch.device:
    """The device named (a benchmark's --device), present on this machine, its index too; else the one line a bench
    script ends bad input with (SystemExit: the same under `python bench/<script>.py` and `armlm bench`), naming
    `fix`. `given`: how the caller's command line asked for it (default --device <name>)."""
    device = torch.device(name)
    count = torch.cuda.device_count() if device.type == "cuda" and device_present("cuda") else 0
    if not device_present(device.type) or (device.type == "cuda" and (device.index or 0) >= count):
        seen = f"{count} cuda device{'s' * (count != 1)}" if count else f"no {device.type} device"
        raise SystemExit(f"{given or f'--device {name}'}: torch {torch.__version__} sees {seen} on this machine; {fix}")
    return device
