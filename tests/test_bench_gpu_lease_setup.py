"""What a lease sets up before its parts: armlm linked from the checkout that travelled (bench/checkout_site.py), and
the size of what a call sends against the device tool's limit (bench/gpu_lease_prepare.sh --check)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.checkout_site import link_checkout, package_dirs

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_links_import_every_package_from_the_checkout_ahead_of_the_installed_one(tmp_path):
    site = tmp_path / "site"
    (site / "armlm").mkdir(parents=True)
    (site / "armlm" / "stale.py").write_text("")  # an installed copy the links replace
    link_checkout(site)
    names = sorted(package_dirs())
    probe = ("import importlib, os, sys\n"
             "for name in sys.argv[1:]:\n"
             "    module = importlib.import_module(name)\n"
             "    print(name, module.__file__, os.path.realpath(module.__file__))\n")
    env = {**os.environ, "PYTHONPATH": str(site)}
    lines = subprocess.run([sys.executable, "-c", probe, *names], cwd=tmp_path, env=env, text=True,
                           capture_output=True, check=True).stdout.splitlines()
    assert len(lines) == len(names)
    for line, name in zip(lines, names):
        _, imported, real = line.split()
        assert imported.startswith(str(site)), line  # the links, not the editable install
        assert real == str(REPO / package_dirs()[name] / "__init__.py"), line
    assert not (site / "armlm" / "stale.py").exists()
    assert (site / "armlm" / "configs" / "train.yaml").is_file()  # package data comes through the links
    command = subprocess.run([sys.executable, "-m", "armlm", "--help"], cwd=tmp_path, env=env, text=True,
                             capture_output=True)
    assert command.returncode == 0 and "train" in command.stdout, command.stderr[-800:]


def test_linking_again_replaces_the_links_and_never_touches_the_checkout(tmp_path):
    before = sorted(p.name for p in (REPO / "models").iterdir())
    link_checkout(tmp_path)
    link_checkout(tmp_path)
    assert (tmp_path / "armlm" / "models").is_symlink()
    assert sorted(p.name for p in (REPO / "models").iterdir()) == before


def test_a_mapping_to_a_folder_that_is_not_a_package_is_one_line(tmp_path):
    repo = tmp_path / "repo"
    (repo / "cli").mkdir(parents=True)
    (repo / "cli" / "__init__.py").write_text("")
    (repo / "pyproject.toml").write_text('[tool.setuptools.package-dir]\n"armlm" = "cli"\n"armlm.models" = "models"\n')
    with pytest.raises(SystemExit, match="models in pyproject's package-dir is not a package"):
        link_checkout(tmp_path / "site", repo)


def sized_repo(tmp_path: Path, tracked_mib: int, carry_mib: int | None) -> Path:
    repo = tmp_path / "repo"
    (repo / "bench").mkdir(parents=True)
    shutil.copy(REPO / "bench" / "gpu_lease_prepare.sh", repo / "bench")
    (repo / "records").mkdir()
    (repo / "records" / "big.json").write_bytes(b"x" * (tracked_mib << 20))
    (repo / ".gitignore").write_text("/.gpu-carry/\n/.gpu-data.tar.xz\n/ignored/\n")
    (repo / "ignored").mkdir()
    (repo / "ignored" / "cache.bin").write_bytes(b"x" * (8 << 20))  # ignored: not sent
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "add", "."], cwd=repo, check=True)
    if carry_mib is not None:
        (repo / ".gpu-carry").mkdir()
        (repo / ".gpu-carry" / "wheel.whl").write_bytes(b"x" * (carry_mib << 20))
        (repo / ".gpu-data.tar.xz").write_bytes(b"x" * 1024)
    return repo


def check(repo: Path, limit_mib: int) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "bench/gpu_lease_prepare.sh", "--check"], cwd=repo, text=True, capture_output=True,
                          env={**os.environ, "LIMIT_MIB": str(limit_mib)})


def test_the_size_check_counts_the_checkout_and_the_carry_and_refuses_what_cannot_travel(tmp_path):
    repo = sized_repo(tmp_path, tracked_mib=3, carry_mib=2)
    fits = check(repo, limit_mib=6)
    assert fits.returncode == 0, fits.stderr
    assert "checkout 3.0 MiB (records/, docs/, notebooks/: 3.0) + carry 2.0 MiB = 5.0 of 6 MiB" in fits.stdout
    over = check(repo, limit_mib=4)
    assert over.returncode == 1
    assert over.stderr.count("\n") == 1 and "5.0 MiB would travel, over 4" in over.stderr
    assert "mv records docs notebooks ../aside/" in over.stderr


def test_what_was_set_aside_is_not_counted(tmp_path):
    """After its own advice (records/ moved out, still tracked), the check measures what is left, not an error."""
    repo = sized_repo(tmp_path, tracked_mib=3, carry_mib=2)
    (repo / "records").rename(tmp_path / "aside")
    fits = check(repo, limit_mib=4)
    assert fits.returncode == 0, fits.stderr
    assert "checkout 0.0 MiB (records/, docs/, notebooks/: 0.0) + carry 2.0 MiB = 2.0 of 4 MiB" in fits.stdout


def test_the_size_check_without_a_carry_says_how_to_make_it(tmp_path):
    done = check(sized_repo(tmp_path, tracked_mib=1, carry_mib=None), limit_mib=64)
    assert done.returncode == 1 and done.stderr.count("\n") == 1
    assert ".gpu-carry is missing; run bash bench/gpu_lease_prepare.sh" in done.stderr
