"""Runs the tests share: folders built once per test run across the xdist workers (shared_across_workers), and the
tiny pretraining runs built in them on first use (PretrainedRuns, a BuiltOnFirstUse)."""

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


class BuiltOnFirstUse(Mapping[str, Path]):
    """Folders by name, each built (`build`) the first time it is read; `in`, iteration and len() build none, where
    Mapping's own `in` would read, and so build, the folder to find out."""

    def __init__(self, names: list[str]) -> None:
        self.names, self.built = names, {}

    def build(self, name: str) -> Path:
        raise NotImplementedError

    def __getitem__(self, name: str) -> Path:
        if name not in self.names:
            raise KeyError(name)
        if name not in self.built:
            self.built[name] = self.build(name)
        return self.built[name]

    def __contains__(self, name: object) -> bool:
        return name in self.names

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)


class PretrainedRuns(BuiltOnFirstUse):
    """Run folders of tiny pretraining runs (label -> overrides of tiny_config), each built on first use, once per
    test run across the workers: two workers that need different runs build them side by side."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory, cache_dir: Path, name: str,
                 runs: dict[str, tuple[str, ...]]) -> None:
        super().__init__(list(runs))
        self.tmp_path_factory, self.cache_dir, self.name, self.runs = tmp_path_factory, cache_dir, name, runs

    def build(self, label: str) -> Path:
        from armlm.training.run import run_pretraining

        build = lambda folder: run_pretraining(tiny_config(folder, self.cache_dir, *self.runs[label]))  # noqa: E731
        return shared_across_workers(self.tmp_path_factory, f"{self.name}-{label}", build)
