"""What every command does with a user error (common.errors.ArmlmError: a setting, a file, a checkpoint): one line
naming the problem and the fix, exit status 1, no traceback (the messages are written for the person at the
terminal). Any other exception keeps its traceback: it is a bug or a failure below armlm, and reads as one.
ARMLM_TRACEBACK=1 shows the full trace of a user error too. And where a command configured logging, Lightning's
messages take the command's route, once (lightning_through_the_root)."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig
from omegaconf.errors import MissingMandatoryValue

from armlm.common.errors import ArmlmError

CONFIG_ERRORS: tuple[type[BaseException], ...] = (ArmlmError,)
TRACEBACK_VARIABLE = "ARMLM_TRACEBACK"


def wants_traceback() -> bool:
    return os.environ.get(TRACEBACK_VARIABLE, "").strip().lower() not in ("", "0", "false", "no")


def run_or_exit(run: Callable[[DictConfig | None], Any], cfg: DictConfig | None, log: logging.Logger,
                errors: tuple[type[BaseException], ...] = CONFIG_ERRORS) -> None:
    try:
        run(cfg)
    except MissingMandatoryValue as err:  # a `???` in a command's config the user did not give
        if wants_traceback():
            raise
        key = err.full_key or "a required setting"
        log.error("ArmlmError: %s has no value; give it on the command line, e.g. %s=<value>", key, key)
        sys.exit(1)
    except errors as err:
        if wants_traceback():
            raise
        log.error("%s: %s", type(err).__name__, err)  # the line ends with the message: it may end in a command
        sys.exit(1)


# The packages that give themselves a console handler at import
LIGHTNING_PACKAGES = ("lightning", "lightning.pytorch", "lightning.fabric")


def lightning_through_the_root() -> None:
    """Where logging is configured (Hydra's console and run-log handlers on the root logger), Lightning's messages
    take that route alone. At import its packages add console handlers of their own, and which way a message went
    depended on whether Lightning was imported before Hydra configured logging (printed bare, never in the run's
    log file) or after (printed twice, "INFO: ..." beside Hydra's line). Without root handlers, theirs stay."""
    if not logging.getLogger().handlers:
        return
    for name in LIGHTNING_PACKAGES:
        logger = logging.getLogger(name)
        for handler in [h for h in logger.handlers if type(h) is logging.StreamHandler]:
            logger.removeHandler(handler)
        logger.propagate = True
