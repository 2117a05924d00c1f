"""A study's measured results, kept where the loss of a machine cannot take them.

A long study outlives the machine it starts on: its seeds take hours, and the folder under `root=` goes with
the machine. With `record=<folder>` (a folder committed beside the code, e.g. `records/findings-cpu`), every
*unit* that finishes is copied there without its checkpoints or logs: a unit is a set of stages joined by what
they read, e.g. a pretraining run and every stage that reads its checkpoint (its fine-tunes, diagnostics,
zero-shot scores, another arm diagnosing it). A later launch of the same study on a fresh machine restores each
kept unit into the root instead of redoing it, and the report reads restored and live units alike.

Kept per stage folder: its JSON results and records (summary, results, diagnostics, zeroshot, stage.json), the
Hydra config and overrides it ran with, Markdown and CSV tables, and `scalars.csv` exported from its TensorBoard
events (common/scalars.py); then `kept.json` (when, from which code, on which machine), written last. Not kept:
checkpoints, event files, logs (the CSV and W&B loggers' folders too), vectors, tokenizers. So a restored unit can
be reported but not trained on: a stage added later that reads its weights fails, naming the missing checkpoint.

Units are those of the whole plan, whatever `arm=` selects, of the kinds of stage the launch runs (`stages=`: seeds
run for a fine-tuning finding alone are kept without the diagnostics they never get). A unit is kept only once all
of its stages are done,
and kept whole from one run of it. It is restored only if all of its stages are kept and none of their folders
exists in the root, and every done file is written after every other file: a half-run unit is redone here,
never stitched to a kept half.
"""

from __future__ import annotations

import json
import logging
import os
import platform
from datetime import datetime, timezone
from pathlib import Path

from armlm.common.atomic import atomic_file, atomic_write_artefact
from armlm.common.errors import ArmlmError
from armlm.common.machine import cpu_has_bf16_units, cpu_model
from armlm.common.provenance import armlm_commit
from armlm.common.scalars import SCALARS_CSV, event_scalars, write_scalars_csv
from armlm.studies.plan import Stage
from armlm.studies.runner import RECORD as STAGE_RECORD

log = logging.getLogger("armlm.study")
KEPT_SUFFIXES = {".json", ".yaml", ".md", ".csv"}
NOT_KEPT_FOLDERS = {"checkpoints", "tensorboard", "vectors", "csv", "wandb", "lightning_logs"}
NOT_KEPT_NAMES = {"tokenizer.json", "hydra.yaml"}  # the vocabulary; Hydra's runtime (machine paths)
MAX_KEPT_BYTES = 2_000_000  # an optional file above this is not a results file
MAX_REQUIRED_BYTES = 50_000_000  # a done file this large is a bug (an exact diagnosis's per-pair tables are far less)
KEPT_FILE = "kept.json"  # in a kept stage folder, written after its other files: the stage is kept


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


def _required(stage: Stage) -> set[str]:
    return {stage.done_file.name, STAGE_RECORD, SCALARS_CSV}


def kept_files(stage: Stage, folder: Path) -> list[Path]:
    """The files of a stage folder (live or kept) that a record keeps, relative to the folder. A required file
    (the done file, stage.json, scalars.csv) is never dropped: one too large stops the recording."""
    kept = []
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        hidden = [part for part in relative.parts[:-1] if part.startswith(".") and part != ".hydra"]
        if (not path.is_file() or path.suffix not in KEPT_SUFFIXES or path.name.startswith(".")
                or path.name in NOT_KEPT_NAMES | {KEPT_FILE} or hidden
                or NOT_KEPT_FOLDERS.intersection(relative.parts[:-1])):
            continue
        if relative.as_posix() in _required(stage):
            if path.stat().st_size > MAX_REQUIRED_BYTES:
                raise ArmlmError(f"{path} is {path.stat().st_size} bytes, above the record's {MAX_REQUIRED_BYTES}: "
                                 "a results file that large is a bug; nothing of its unit was kept")
        elif path.stat().st_size > MAX_KEPT_BYTES:
            log.warning("record: %s is %d bytes, above %d, and is not kept", path, path.stat().st_size,
                        MAX_KEPT_BYTES)
            continue
        kept.append(relative)
    return kept


def copy_files(source: Path, target: Path, files: list[Path]) -> None:
    for relative in files:
        with atomic_file(target / relative, "wb") as out:
            out.write((source / relative).read_bytes())


def _machine() -> dict[str, object]:
    """What a kept unit's wall times and numerics depend on: on a CPU, train.py trains in bf16 only where it has
    bf16 units (training.setup), so units kept from two machines can differ in precision."""
    return {"cores": os.cpu_count(), "cpu": cpu_model(), "bf16_units": cpu_has_bf16_units(),
            "python": platform.python_version()}


def _key(stage: Stage, root: Path) -> Path:
    return stage.folder.relative_to(root)


def is_kept(stage: Stage, root: Path, record: Path) -> bool:
    return (record / _key(stage, root) / KEPT_FILE).is_file()


def kept_entry(stage: Stage, root: Path, record: Path) -> dict:
    path = record / _key(stage, root) / KEPT_FILE
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ArmlmError(f"{path} is not valid JSON ({err}); restore it from git (git checkout -- {path})") from err


def record_finished(stages: list[Stage], root: Path, record: Path) -> list[str]:
    """Keep, whole, every unit whose stages are all done and not all kept; returns the units' names. `stages`:
    the whole plan (every arm), so a unit is never judged by a selection's part of it."""
    recorded = []
    for unit in units(stages):
        if all(is_kept(s, root, record) for s in unit) or not all(s.done_file.is_file() for s in unit):
            continue
        for stage in unit:  # a unit kept before in part (another run of it) is kept again from this one
            (record / _key(stage, root) / KEPT_FILE).unlink(missing_ok=True)
        entry = {"unit": unit_name(unit), "recorded": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                 "code": armlm_commit(), "machine": _machine()}
        for stage in unit:
            target = record / _key(stage, root)
            files = [f for f in kept_files(stage, stage.folder) if f.as_posix() != SCALARS_CSV]
            copy_files(stage.folder, target, files)
            if (stage.folder / "tensorboard").is_dir():  # after the copy: the live events, not a stale export
                with atomic_file(target / SCALARS_CSV) as f:
                    write_scalars_csv(event_scalars(stage.folder / "tensorboard"), f)
        for stage in unit:
            atomic_write_artefact(record / _key(stage, root) / KEPT_FILE, entry, sort_keys=True)
        recorded.append(unit_name(unit))
        log.info("record: %s kept in %s", unit_name(unit), record)
    return recorded


def restore_recorded(stages: list[Stage], root: Path, record: Path) -> set[Stage]:
    """Copy back every unit whose stages are all kept and none of whose folders exists in `root` (a unit begun
    here, in part or whole, is finished here); returns the restored stages. Every other file of the unit is
    written before any done file, and stage.json is rewritten for this root, so the runner takes each stage
    as this study's own."""
    restored: set[Stage] = set()
    for unit in units(stages):
        if not all(is_kept(s, root, record) for s in unit) or any(s.folder.exists() for s in unit):
            continue
        entry = kept_entry(unit[0], root, record)
        for stage in unit:
            source = record / _key(stage, root)
            files = kept_files(stage, source)
            if stage.done_file.relative_to(stage.folder) not in files:
                raise ArmlmError(f"{source} is marked kept but has no {stage.done_file.name}: the record is "
                                 "damaged; restore it from git")
            copy_files(source, stage.folder, [f for f in files if f.name not in {stage.done_file.name, STAGE_RECORD}])
            kept = json.loads((source / STAGE_RECORD).read_text()) if (source / STAGE_RECORD).is_file() else {}
            ran = {key: kept[key] for key in ("launches", "seconds") if key in kept}  # how it ran, for the report
            atomic_write_artefact(stage.folder / STAGE_RECORD, {**stage.record(), **ran, "restored_from": str(source)})
        for stage in unit:
            copy_files(record / _key(stage, root), stage.folder, [stage.done_file.relative_to(stage.folder)])
        restored.update(unit)
        log.info("record: %s restored from %s (kept %s, code %s)", unit_name(unit), record, entry["recorded"],
                 entry["code"])
    return restored
