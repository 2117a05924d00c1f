"""What a benchmark asks of the machine before it starts: the device it was given is here."""

from __future__ import annotations

import torch

from armlm.common.devices import missing_device
from armlm.common.errors import ArmlmError


def require_device(name: str, fix: str, given: str | None = None) -> torch.device:
    """The device named (a benchmark's --device), present on this machine, its index too; else the one line a bench
    script ends bad input with (SystemExit: the same under `python bench/<script>.py` and `armlm bench`), naming
    `fix`. `given`: how the caller's command line asked for it (default --device <name>)."""
    try:
        lacking = missing_device(name)
    except ArmlmError as err:
        raise SystemExit(f"{given or f'--device {name}'}: {err}") from None
    if lacking:
        raise SystemExit(f"{given or f'--device {name}'}: {lacking}; {fix}")
    return torch.device(name)
