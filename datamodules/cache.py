"""Atomic cache writes: build in a temporary sibling, then rename into place.

A cache entry is a folder that exists only once complete, so an interrupted run (exception, Ctrl-C,
kill -9) never leaves a half-written entry that a later run would trust.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def settings_key(settings: Any) -> str:
    """Short stable hash of JSON-serialisable settings."""
    blob = json.dumps(settings, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


@contextmanager
def atomic_directory(final: Path) -> Iterator[Path]:
    """Yield an empty temporary folder; on success it becomes `final`, on any error it is removed.

    If another process finished the same entry first, its copy is kept and ours is discarded
    (both were built from the same inputs)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".{final.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        yield tmp
        for f in tmp.iterdir():  # contents on disk before the rename makes them visible
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
        try:
            os.rename(tmp, final)
        except OSError:
            if not final.is_dir():
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
