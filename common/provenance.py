"""Which armlm code a run or an export came from."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@functools.cache
def armlm_commit() -> str | None:
    """HEAD of the armlm checkout this code runs from, with "+dirty" when tracked files have uncommitted changes;
    None outside a git checkout (an installed copy) or without git."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True,
                              timeout=30).stdout.strip()

    try:
        head = git("rev-parse", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "")
