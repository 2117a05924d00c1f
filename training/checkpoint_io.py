"""Checkpoints written so that a kill at any moment leaves the previous file intact and loadable."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

from armlm.common.atomic import atomic_file


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning writes a checkpoint straight over its path (last.ckpt included), so a SIGKILL mid-write
    leaves a truncated file where the previous good one was. Here they go through `atomic_file`, as
    armlm's caches and result files do."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | os.PathLike,
                        storage_options: Any | None = None) -> None:
        if storage_options is not None:
            raise TypeError(f"AtomicCheckpointIO takes no storage_options, got {storage_options!r}")
        with atomic_file(Path(path), "wb") as f:
            torch.save(checkpoint, f)
