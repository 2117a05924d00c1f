"""A command function whose module imports Lightning, as a Hydra command's may: it prints how Lightning's packages
log once the command runs (tests/test_commands.py: run_hydra routes them through Hydra's handlers)."""

from __future__ import annotations

import json
import logging
from typing import Any

import lightning  # noqa: F401 - imported after Hydra configured logging, as a command's heavy stack is

from armlm.common.cli import LIGHTNING_PACKAGES


def report_route(cfg: Any) -> None:
    print(json.dumps({name: [logging.getLogger(name).propagate,
                             [type(h).__name__ for h in logging.getLogger(name).handlers]]
                      for name in LIGHTNING_PACKAGES}))
