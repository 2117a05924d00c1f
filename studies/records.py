"""A study's measured results, kept where the loss of a machine cannot take them.

A long study outlives the machine it starts on: its seeds take hours, and the folder under `root=` goes with
the machine. With `record=<folder>` (a folder committed beside the code, e.g. `records/findings-cpu`), every
*unit* that finishes is copied there without its checkpoints or binary logs: a unit is one pretraining run and
every stage of the study that reads it (its fine-tunes, diagnostics, zero-shot scores, another arm diagnosing
its checkpoint). A later launch of the same study on a fresh machine restores each recorded unit into the
root instead of redoing it, and the report reads restored and live units alike.

Kept per stage folder: its JSON results and records (summary, results, diagnostics, zeroshot, stage.json), the
Hydra config it ran with (`.hydra/*.yaml`), Markdown and CSV tables, and `scalars.csv` exported from its
TensorBoard events (common/scalars.py). Not kept: `checkpoints/`, event files, logs, vectors. So a restored
unit can be reported but not fine-tuned again: a new stage that reads its checkpoint waits for it.

A unit is recorded only once all of its stages are done, and restored only whole and only where none of its
stages exists in the root: a half-run unit is redone, never stitched to a recorded half.
"""

from __future__ import annotations

import json
import logging
import os
import platform
from datetime import datetime, timezone
from pathlib import Path

from common.atomic import atomic_file, atomic_write_text
from common.provenance import armlm_commit
from common.scalars import SCALARS_CSV, event_scalars, write_scalars_csv
from studies.plan import Stage
from training.setup import cpu_has_bf16_units

log = logging.getLogger("armlm.study")
KEPT_SUFFIXES = {".json", ".yaml", ".md", ".csv"}
NOT_KEPT_FOLDERS = {"checkpoints", "tensorboard", "vectors"}
MAX_KEPT_BYTES = 2_000_000  # a results file above this is not a results file (e.g. a tokenizer.json)
UNITS_FILE = "index.json"  # the record's index: when and from which code each stage was kept


def units(stages: list[Stage]) -> list[list[Stage]]:
    """The stages grouped into units: stages joined by what they read (a stage's `needs` naming another
    stage's done file), so a pretraining run and all that reads its checkpoint form one unit. Needs outside
    the list (another study's runs) join nothing."""
    by_done = {stage.done_file: stage for stage in stages}
    parent = {stage: stage for stage in stages}

    def find(stage: Stage) -> Stage:
        while parent[stage] is not stage:
            stage = parent[stage]
        return stage

    for stage in stages:
        for need in stage.needs:
            if need in by_done:
                parent[find(stage)] = find(by_done[need])
    groups: dict[Stage, list[Stage]] = {}
    for stage in stages:
        groups.setdefault(find(stage), []).append(stage)
    return list(groups.values())


def unit_name(unit: list[Stage]) -> str:
    return unit[0].name  # plans list a unit's pretraining (or its first stage) first: "mlm/seed1 pretrain"


def kept_files(folder: Path) -> list[Path]:
    """The files of a stage folder that a record keeps, relative to the folder."""
    kept = []
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if (not path.is_file() or path.suffix not in KEPT_SUFFIXES or path.name.startswith(".")
                or NOT_KEPT_FOLDERS.intersection(relative.parts[:-1])):
            continue
        if path.stat().st_size > MAX_KEPT_BYTES:
            log.warning("record: %s is %d bytes, above %d, and is not kept", path, path.stat().st_size,
                        MAX_KEPT_BYTES)
            continue
        kept.append(relative)
    return kept


def copy_stage(stage: Stage, source: Path, target: Path) -> None:
    """Copy a stage folder's kept files, each atomically and the done file last, so a copy cut short never
    looks like a finished stage."""
    done = stage.done_file.relative_to(stage.folder)
    for relative in sorted(kept_files(source), key=lambda r: r == done):
        with atomic_file(target / relative, "wb") as out:
            out.write((source / relative).read_bytes())


def record_stage(stage: Stage, root: Path, record: Path) -> None:
    target = record / stage.folder.relative_to(root)
    if (stage.folder / "tensorboard").is_dir():
        with atomic_file(target / SCALARS_CSV) as f:
            write_scalars_csv(event_scalars(stage.folder / "tensorboard"), f)
    copy_stage(stage, stage.folder, target)


def _cpu_model() -> str:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor() or platform.machine()
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), platform.machine())


def _machine() -> dict[str, object]:
    """What a kept unit's wall times and numerics depend on: on a CPU, train.py trains in bf16 only where it has
    bf16 units (training.setup), so units kept from two machines can differ in precision."""
    return {"cores": os.cpu_count(), "cpu": _cpu_model(), "bf16_units": cpu_has_bf16_units(),
            "python": platform.python_version()}


def read_index(record: Path) -> dict[str, dict]:
    """The record's index: for each kept stage folder (relative to the root), when and from which code."""
    path = record / UNITS_FILE
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not valid JSON ({err}); restore it from git (git checkout -- {path})") from err


def _key(stage: Stage, root: Path) -> str:
    return stage.folder.relative_to(root).as_posix()


def record_finished(stages: list[Stage], root: Path, record: Path) -> list[str]:
    """Copy every unit whose stages are all done and not all kept into `record`, whole (a unit's kept stages
    always come from one run of it); returns the units' names. The index is written after a unit's files, so an
    index entry always has its files."""
    index = read_index(record)
    recorded = []
    for unit in units(stages):
        if all(_key(stage, root) in index for stage in unit) or not all(s.done_file.is_file() for s in unit):
            continue
        for stage in unit:
            record_stage(stage, root, record)
        entry = {"unit": unit_name(unit), "recorded": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                 "code": armlm_commit(), "machine": _machine()}
        index.update({_key(stage, root): entry for stage in unit})
        atomic_write_text(record / UNITS_FILE, json.dumps(index, indent=2, sort_keys=True))
        recorded.append(unit_name(unit))
        log.info("record: %s kept in %s", unit_name(unit), record)
    return recorded


def restore_recorded(stages: list[Stage], root: Path, record: Path) -> set[Stage]:
    """Copy back every unit whose stages are all recorded and none of which exists in `root` (a unit run here,
    in part or whole, stands); returns the restored stages."""
    index = read_index(record)
    restored: set[Stage] = set()
    for unit in units(stages):
        if not all(_key(stage, root) in index for stage in unit):
            continue
        if any(stage.done_file.is_file() or (stage.folder / "checkpoints").is_dir() for stage in unit):
            continue
        for stage in unit:
            copy_stage(stage, record / _key(stage, root), stage.folder)
        restored.update(unit)
        entry = index[_key(unit[0], root)]
        log.info("record: %s restored from %s (recorded %s, code %s)", unit_name(unit), record, entry["recorded"],
                 entry["code"])
    return restored
