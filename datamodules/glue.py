"""GLUE-style tasks: readers for the release layout and the Hugging Face copy. A task's specification (its folder,
columns and labels) is in its config, configs/task/<name>.yaml under `data`, which GlueTask.from_config reads.

Both readers produce the same `GlueExample` structure with the same label ids (the hub's order), so a
fine-tuning run does not depend on where its data came from.
"""

from __future__ import annotations

import csv
import sys
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from armlm.common.errors import ArmlmError, ArmlmFileError
from armlm.datamodules.hub import load_split
from armlm.datamodules.textfile import read_utf8

csv.field_size_limit(sys.maxsize)  # a few GLUE rows are longer than csv's 128 KiB default


@dataclass(frozen=True)
class GlueTask:
    name: str
    folder: str  # in the GLUE release
    text_columns: tuple[str, ...]  # header names (or positions, for header-less files) of the texts
    label_column: str
    labels: tuple[str, ...]  # label strings in id order; empty for regression
    dev_splits: tuple[str, ...] = ("dev",)
    has_header: bool = True
    hub_text_columns: tuple[str, ...] = ("sentence",)

    @property
    def is_regression(self) -> bool:
        return not self.labels

    @classmethod
    def from_config(cls, name: str, data: Mapping[str, Any]) -> GlueTask:
        """The specification in a task config's `data` (its other keys are the datamodule's settings). Lists become
        tuples, and columns and labels strings, as the files hold them (YAML reads an unquoted 1 as a number)."""
        missing = [k for k in REQUIRED_SPEC if k not in data]
        if missing:
            raise ArmlmError(f"GLUE-style task {name!r} lacks task.data.{', task.data.'.join(missing)} (see "
                             "configs/task/rte.yaml)")
        spec = {f.name: data[f.name] for f in fields(cls) if f.name != "name" and f.name in data}
        for key in SEQUENCE_SPEC:
            if key in spec:
                spec[key] = tuple(str(v) for v in spec[key])
        if not isinstance(spec.get("has_header", True), bool):
            raise ArmlmError(f"task.data.has_header={spec['has_header']!r} for {name!r}; set it to true or false")
        return cls(name=name, **{**spec, "folder": str(spec["folder"]), "label_column": str(spec["label_column"])})


REQUIRED_SPEC = ("folder", "text_columns", "label_column", "labels")
SEQUENCE_SPEC = ("text_columns", "labels", "dev_splits", "hub_text_columns")
HUB_SPLITS = {"train": "train", "dev": "validation", "dev_matched": "validation_matched",
              "dev_mismatched": "validation_mismatched"}


@dataclass(frozen=True)
class GlueExample:
    text_a: str
    text_b: str | None
    label: int | float


def read_release_split(task: GlueTask, folder: Path, split: str) -> list[GlueExample]:
    """One split (`train`, `dev`, `dev_matched`, ...) of the GLUE release layout `<folder>/<Task>/<split>.tsv`.

    The files are tab-separated without quoting (QUOTE_NONE), MRPC's header starts with a UTF-8 BOM."""
    path = Path(folder) / task.folder / f"{split}.tsv"
    if not path.is_file():
        raise ArmlmFileError(
            f"GLUE {task.name}: {path} is missing; the folder must follow the GLUE release layout "
            f"(<data>/{task.folder}/train.tsv, {', '.join(s + '.tsv' for s in task.dev_splits)})"
        )
    # One row per line ([] for a blank one; QUOTE_NONE: no field spans lines), so a row's index is its line.
    rows = list(csv.reader(read_utf8(path).split("\n"), delimiter="\t", quoting=csv.QUOTE_NONE))
    if task.has_header:
        if not rows or not rows[0]:
            raise ArmlmError(f"{path}:1: no header line; is this the GLUE {task.name} file?")
        header, rows, first_line = rows[0], rows[1:], 2
        columns = {name: i for i, name in enumerate(header)}
        missing = [c for c in (*task.text_columns, task.label_column) if c not in columns]
        if missing:
            raise ArmlmError(f"{path}:1: header {header} lacks columns {missing}; is this the GLUE {task.name} file?")
        text_idx = [columns[c] for c in task.text_columns]
        label_idx, width = columns[task.label_column], len(header)
    else:
        text_idx, label_idx, width, first_line = [int(c) for c in task.text_columns], int(task.label_column), 4, 1
    return [_example(task, row, text_idx, label_idx, width, f"{path}:{line}")
            for line, row in enumerate(rows, start=first_line) if row]


def _example(task: GlueTask, row: list[str], text_idx: list[int], label_idx: int, width: int,
             where: str) -> GlueExample:
    if len(row) < width:
        raise ArmlmError(f"{where}: {len(row)} columns where the GLUE {task.name} file has {width}; "
                         "the row is truncated or not tab-separated")
    raw = row[label_idx].strip()
    if task.is_regression:
        try:
            label: int | float = float(raw)
        except ValueError:
            raise ArmlmError(f"{where}: score {raw!r} is not a number") from None
    else:
        if raw not in task.labels:
            raise ArmlmError(f"{where}: label {raw!r} is not one of {task.labels} for GLUE {task.name}")
        label = task.labels.index(raw)
    texts = [row[i] for i in text_idx]
    return GlueExample(texts[0], texts[1] if len(texts) > 1 else None, label)


def read_hub_split(task: GlueTask, split: str, dataset_name: str = "nyu-mll/glue") -> list[GlueExample]:
    """The same split from the Hugging Face copy (`nyu-mll/glue`, config = task name), or from a folder
    written with `DatasetDict.save_to_disk` (how this path is tested offline)."""
    dataset = load_split(dataset_name, HUB_SPLITS[split], task.name, what=f"GLUE {task.name} ({split})",
                         offline_fix="Use a local folder in the GLUE release layout instead.")
    columns = task.hub_text_columns
    return [GlueExample(row[columns[0]], row[columns[1]] if len(columns) > 1 else None,
                        float(row["label"]) if task.is_regression else int(row["label"]))
            for row in dataset]
