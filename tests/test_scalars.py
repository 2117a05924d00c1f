"""common/scalars.py: TensorBoard events and the kept scalars.csv read back to the same table, quietly."""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd
import pytest
from torch.utils.tensorboard import SummaryWriter

from armlm.common.scalars import SCALARS_CSV, event_scalars, read_scalars_csv, run_scalars, write_scalars_csv


def write_events(folder: Path) -> None:
    with SummaryWriter(str(folder)) as writer:
        for step in (0, 5, 10):
            writer.add_scalar("val/loss", 4.0 - 0.1 * step, step)
        writer.add_scalar("train/loss", 3.25, 5)


def test_events_read_back_as_one_table_per_step(tmp_path: Path) -> None:
    write_events(tmp_path / "tensorboard")
    frame = event_scalars(tmp_path / "tensorboard")
    assert list(frame.index) == [0, 5, 10]
    assert frame.loc[5, "train/loss"] == 3.25 and pd.isna(frame.loc[0, "train/loss"])
    assert frame["val/loss"].tolist() == pytest.approx([4.0, 3.5, 3.0])


def test_events_read_back_the_clock_time_each_value_was_logged(tmp_path: Path) -> None:
    write_events(tmp_path / "tensorboard")
    values, times = event_scalars(tmp_path / "tensorboard"), event_scalars(tmp_path / "tensorboard", wall_time=True)
    assert list(times.index) == list(values.index) and list(times.columns) == list(values.columns)
    assert times["val/loss"].is_monotonic_increasing and times["val/loss"].iloc[0] > 1.7e9  # seconds since the epoch
    assert pd.isna(times.loc[0, "train/loss"]) and times.loc[5, "train/loss"] >= times.loc[5, "val/loss"]


def test_reading_events_logs_nothing_at_info_and_restores_the_level(tmp_path: Path,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    write_events(tmp_path / "tensorboard")
    caplog.set_level(logging.INFO)  # the root captures INFO; TensorBoard's reader would log "No path found"
    before = logging.getLogger("tensorboard").level
    event_scalars(tmp_path / "tensorboard")
    assert [r.getMessage() for r in caplog.records if r.name.startswith("tensorboard")] == []
    assert logging.getLogger("tensorboard").level == before


def test_a_kept_csv_reads_back_to_the_event_values(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write_events(run / "tensorboard")
    live = run_scalars(run)
    write_scalars_csv(live, run / SCALARS_CSV)
    (run / "tensorboard" / next(p.name for p in (run / "tensorboard").iterdir())).unlink()
    (run / "tensorboard").rmdir()
    pd.testing.assert_frame_equal(run_scalars(run), live, check_names=False)
    assert read_scalars_csv(run / SCALARS_CSV).equals(run_scalars(run))


def test_a_run_without_scalars_names_the_logger_to_use(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="logger=\\[tensorboard,csv\\]"):
        run_scalars(tmp_path)
