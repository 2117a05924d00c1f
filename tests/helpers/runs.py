"""Runs the tests share: folders built once per test run across the xdist workers (shared_across_workers), and the
tiny pretraining runs built in them on first use (PretrainedRuns)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest
from filelock import FileLock

from tests.helpers.configs import tiny_config


def shared_across_workers(tmp_path_factory: pytest.TempPathFactory, name: str,
                          build: Callable[[Path], object]) -> Path:
    """A folder built once per test run, by whichever xdist worker asks first: the others wait on its lock, then
    read it. It counts as built only once `build` returned (a marker file), so a failed build is redone by the
    next test that asks, not taken for finished."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # shared by the workers of this run (pytest-of-<user>/pytest-<n>/)
    folder = base / "shared" / name
    folder.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder) + ".lock"):
        if not (folder / ".built").exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            build(folder)
            (folder / ".built").touch()
    return folder


class PretrainedRuns(Mapping[str, Path]):
    """Run folders of tiny pretraining runs (label -> overrides of tiny_config), each built on first use, once per
    test run across the workers: two workers that need different runs build them side by side."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory, cache_dir: Path, name: str,
                 runs: dict[str, tuple[str, ...]]) -> None:
        self.tmp_path_factory, self.cache_dir, self.name, self.runs = tmp_path_factory, cache_dir, name, runs

    def __getitem__(self, label: str) -> Path:
        from armlm.training.run import run_pretraining

        if label not in self.runs:
            raise KeyError(label)

        build = lambda folder: run_pretraining(tiny_config(folder, self.cache_dir, *self.runs[label]))  # noqa: E731
        return shared_across_workers(self.tmp_path_factory, f"{self.name}-{label}", build)

    def __contains__(self, label: object) -> bool:  # Mapping's own would build the run to find out
        return label in self.runs

    def __iter__(self) -> Iterator[str]:
        return iter(self.runs)

    def __len__(self) -> int:
        return len(self.runs)
