"""What a run's loggers need of the machine, asked before any data is read."""

from __future__ import annotations

import netrc
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from hydra.utils import get_class
from lightning.pytorch.loggers import WandbLogger
from omegaconf import DictConfig

from armlm.common.errors import ArmlmError


def check_loggers(loggers: DictConfig | None) -> None:
    """A logger that signs in to an account (W&B, online) has credentials here, asked before any data is read and
    without W&B's login, which can prompt or reach the network: without a key W&B raised its UsageError from inside
    fit, after the data was built, as a traceback. Offline (or W&B's disabled mode) it needs none."""
    for name, config in (loggers or {}).items():
        if not _is_class(config.get("_target_"), WandbLogger) or config.get("offline") in (True, "true", "True"):
            continue
        if os.environ.get("WANDB_MODE", config.get("mode")) in ("offline", "disabled", "dryrun") or _wandb_credentials():
            continue
        raise ArmlmError(f"logger={name}: W&B finds no API key here (WANDB_API_KEY, or the netrc entry `wandb login` "
                         f"writes); run `wandb login`, or log offline: logger.{name}.offline=true (WANDB_MODE=offline), "
                         "then `wandb sync <run folder>/wandb/offline-run-*`")


def _is_class(target: Any, cls: type) -> bool:
    try:
        return isinstance(target, str) and issubclass(get_class(target), cls)
    except (ImportError, ValueError, TypeError):  # not a class (a function target), or not importable: not this one
        return False


def _wandb_credentials() -> bool:
    """Where W&B looks for a key without asking: the environment, an identity token, or a netrc entry for its host."""
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname
    files = [os.environ["NETRC"]] if os.environ.get("NETRC") else [Path.home() / ".netrc", Path.home() / "_netrc"]
    for path in files:
        try:
            if netrc.netrc(str(path)).authenticators(host):
                return True
        except (OSError, netrc.NetrcParseError):
            continue
    return False
