"""Atomic file writes: a file is written to a temporary sibling, flushed to disk and renamed into place, so a
reader (or a run resumed after a kill) sees the old content or the new one, never half of either."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from armlm.common.errors import ArmlmError
from armlm.common.migrations import SCHEMA_VERSION, migrate_code_references, schema_version, versioned


@contextmanager
def atomic_file(path: Path, mode: str = "w") -> Iterator[Any]:
    """Yield an open temporary sibling of `path`; once the block ends, its bytes are on disk and replace
    `path` in one rename. On any error (or a kill) the old `path` stays as it was."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        with open(tmp, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write_text(path: Path, text: str) -> None:
    """Write a small file so readers see the old content or the new one, never a mix."""
    with atomic_file(path) as f:
        f.write(text)


def atomic_write_artefact(path: Path, artefact: dict[str, Any], sort_keys: bool = False, compact: bool = False) -> None:
    """A JSON artefact (a summary, results, a report, a stage record), atomically, with the schema version it is
    written in first (read_artefact refuses older ones). `compact`: one line, for long lists of numbers."""
    text = (json.dumps(versioned(artefact), separators=(",", ":"), sort_keys=sort_keys) if compact
            else json.dumps(versioned(artefact), indent=2, sort_keys=sort_keys))
    atomic_write_text(path, text)


def read_artefact(path: Path) -> dict[str, Any]:
    """A run or study artefact (summary, results, stage record, diagnostics, zero-shot report) in today's schema.
    One written in an older schema is refused, not patched as it is read: it is rewritten once, on disk. The code it
    names is named as today (common.migrations.migrate_code_references: before the `armlm` namespace)."""
    try:
        artefact = json.loads(Path(path).read_text())
    except json.JSONDecodeError as err:
        raise ArmlmError(f"{path} is not valid JSON ({err}); delete it and rerun the stage that wrote it") from err
    if schema_version(artefact) < SCHEMA_VERSION:
        raise ArmlmError(f"{path} is in schema version {schema_version(artefact)}, older than today's "
                         f"{SCHEMA_VERSION}; rewrite its folder once with python records/rewrite_schema3.py <folder>")
    return migrate_code_references(artefact)
