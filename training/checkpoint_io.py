"""Checkpoints written so that a kill at any moment leaves the previous file intact and loadable."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning writes a checkpoint straight over its path (last.ckpt included), so a SIGKILL mid-write
    leaves a truncated file where the previous good one was. Here the bytes go to a temporary sibling,
    reach the disk (fsync), and only then replace the old file in one rename."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | os.PathLike,
                        storage_options: Any | None = None) -> None:
        if storage_options is not None:
            raise TypeError(f"AtomicCheckpointIO takes no storage_options, got {storage_options!r}")
        final = Path(path)
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = final.parent / f".{final.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            with open(tmp, "wb") as f:
                torch.save(checkpoint, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, final)
        finally:
            tmp.unlink(missing_ok=True)
