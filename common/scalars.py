"""A run's logged scalars as one table: read from its TensorBoard event files, or from the `scalars.csv` that a
study record keeps in their place (studies/keeping.py), so reports read a restored run as they read a live one."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import IO

import pandas as pd
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from armlm.common.errors import ArmlmFileError

SCALARS_CSV = "scalars.csv"  # beside tensorboard/: the same table, kept where event files are not


def loaded_events(tensorboard: Path) -> EventAccumulator:
    events = EventAccumulator(str(tensorboard), size_guidance={"scalars": 0})  # 0: keep every point
    # TensorBoard's reader logs "No path found after <file>" at INFO for every folder it finishes: a report over a
    # study printed one such line per run, burying its own output. Quieted for this read only.
    reader_log = logging.getLogger("tensorboard")
    level = reader_log.level
    reader_log.setLevel(logging.WARNING)
    try:
        events.Reload()
    finally:
        reader_log.setLevel(level)
    return events


def event_scalars(tensorboard: Path, wall_time: bool = False) -> pd.DataFrame:
    """Every scalar tag in a TensorBoard folder, one column per tag, indexed by step: the logged values, or with
    `wall_time` the clock time (seconds since the epoch) at which each was logged, a run's pace."""
    return scalar_frame(loaded_events(tensorboard), wall_time)


def scalar_frame(events: EventAccumulator, wall_time: bool = False) -> pd.DataFrame:
    """event_scalars' table from a folder already loaded (loaded_events): values and times from one read."""
    series = {tag: pd.Series({e.step: e.wall_time if wall_time else e.value for e in events.Scalars(tag)},
                             dtype=float)
              for tag in events.Tags()["scalars"]}
    frame = pd.DataFrame(series).sort_index()
    frame.index.name = "step"
    return frame


def write_scalars_csv(frame: pd.DataFrame, path_or_file: Path | IO[str]) -> None:
    # repr-exact floats, so the CSV reads back to the very values the event files hold
    frame.to_csv(path_or_file, float_format="%.17g")


def read_scalars_csv(path: Path) -> pd.DataFrame:
    frame = pd.read_csv(path, index_col="step")
    return frame.astype(float)


def run_scalars(run: Path) -> pd.DataFrame:
    """A run folder's scalars: its event files if it has them, else its kept scalars.csv."""
    if (run / "tensorboard").is_dir():
        return event_scalars(run / "tensorboard")
    if (run / SCALARS_CSV).is_file():
        return read_scalars_csv(run / SCALARS_CSV)
    raise ArmlmFileError(f"{run} has no tensorboard/ folder (nor a study record's {SCALARS_CSV}): armlm's reports "
                            "read TensorBoard; train with tensorboard among the loggers (the default, or "
                            "'logger=[tensorboard,csv]')")
