"""A disk that fills mid-run: one line naming the full disk, the newest intact checkpoint and the command that
resumes from it, instead of the traceback of whichever writer (torch.save, TensorBoard) hit it first. Checkpoints
are written atomically (training.checkpoint_io), so the ones already on disk load."""

from __future__ import annotations

import errno
import os
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any


class DiskFullError(OSError):
    """The run stopped because a write found no space left; its message says how to resume."""

    def __str__(self) -> str:  # the message alone: OSError's "[Errno 28] " prefix says nothing the message doesn't
        return str(self.strerror)


def disk_full_cause(err: BaseException) -> OSError | None:
    """The ENOSPC error behind `err`, following its causes and contexts, or None."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno == errno.ENOSPC:
            return err
        err = err.__cause__ or err.__context__
    return None


def newest_checkpoint(folder: Path) -> Path | None:
    found = [p for p in folder.glob("*.ckpt") if p.is_file()]
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def mount_point(path: Path) -> Path:
    """The mount point of the file system that holds `path` (or the nearest folder above it that exists): a path
    that does not exist is no mount point, so the walk up passes it; "/" always is one."""
    path = Path(os.path.abspath(path))
    while not os.path.ismount(path):
        path = path.parent
    return path


def disk_full_message(cause: OSError, run_folder: Path, overrides: list[str]) -> str:
    """What happened, what is intact, and the resume command (the run's own overrides, its folder, the checkpoint)."""
    disk = f"no space left on the disk mounted at {mount_point(Path(cause.filename or run_folder))}"
    where = f" writing {cause.filename}" if cause.filename else ""
    intact = newest_checkpoint(run_folder / "checkpoints")
    kept = [o for o in overrides if not o.split("=", 1)[0].lstrip("+~") in ("hydra.run.dir", "ckpt_path")]
    if intact is None:
        return (f"{disk}{where} ({run_folder}), before any checkpoint was written; free space and "
                f"run it again: python train.py {shlex.join(kept)}")
    resume = "last" if intact.name == "last.ckpt" else str(intact)
    command = shlex.join(["python", "train.py", *kept, f"hydra.run.dir={run_folder}", f"ckpt_path={resume}"])
    return (f"{disk}{where}. The newest checkpoint, {intact}, is intact; free space on the disk "
            f"of {run_folder}, then resume: {command}")


def reporting_full_disk(run: Callable[[Any], Any], cfg: Any, overrides: list[str]) -> Any:
    """run(cfg), with a write that found the disk full (whichever writer hit it) raised as DiskFullError, whose
    message names the intact checkpoint and the command that resumes from it."""
    try:
        return run(cfg)
    except Exception as err:
        cause = disk_full_cause(err)
        if cause is None:
            raise
        raise DiskFullError(errno.ENOSPC, disk_full_message(cause, Path(cfg.output_dir), overrides)) from None
