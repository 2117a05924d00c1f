"""What every command does with a configuration or data error: one line naming the problem and the fix, exit
status 1, no traceback (the messages are written for the person at the terminal)."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig

CONFIG_ERRORS: tuple[type[BaseException], ...] = (ValueError, FileNotFoundError)


def run_or_exit(run: Callable[[DictConfig], Any], cfg: DictConfig, log: logging.Logger,
                errors: tuple[type[BaseException], ...] = CONFIG_ERRORS) -> None:
    try:
        run(cfg)
    except errors as err:
        log.error("%s: %s", type(err).__name__, err)
        sys.exit(1)
