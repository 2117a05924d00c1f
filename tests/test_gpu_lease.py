"""bench/gpu_lease.sh --dry-run: every part of the lease's one call at smoke size on the CPU, each part's exit status
in parts.txt, and what comes back: one archive and the tables, at most 8 files (the device tool's limit)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from bench.gpu_learns import VARIANTS

REPO = Path(__file__).resolve().parents[1]


def archive_text(out: Path, name: str) -> str:
    with tarfile.open(out / "lease.tar.gz") as archive:
        return archive.extractfile(name).read().decode()


@pytest.mark.slow
def test_the_lease_scripts_dry_run_runs_every_part_and_returns_one_archive(tmp_path, data_dir):
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "PYTHON": sys.executable, "WALL": "900", "ARMLM_DATA_DIR": str(data_dir)}
    done = subprocess.run(["bash", "bench/gpu_lease.sh", "--dry-run"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    parts = (out / "parts.txt").read_text()
    for name in ("learns", "objectives", "cuda-tests", "throughput", "profile", "train", "launch", "study"):
        assert f"{name}: rc=0," in parts, parts
    # armlm was imported through links to this checkout (bench/checkout_site.py), not from an installed copy
    linked, arrow, target = next(line for line in (out / "device.txt").read_text().splitlines()
                                 if line.startswith("armlm ")).split()[1:]
    assert not linked.startswith(str(REPO)) and target == str(REPO / "cli" / "__init__.py")
    returned = sorted(p.name for p in out.iterdir())
    assert returned == ["device.txt", "learns.md", "lease.tar.gz", "objectives.md", "parts.txt"]
    with tarfile.open(out / "lease.tar.gz") as archive:
        names = archive.getnames()
        assert not any(name.endswith(".ckpt") or "events.out" in name for name in names)
        learns = [json.loads(line) for line in archive.extractfile("./learns.jsonl").read().decode().splitlines()]
        objectives = [json.loads(line) for line in archive.extractfile("./objectives.jsonl").read().decode().splitlines()]
    # each variant ran its steps and measured its gradients; a 3-step run learns nothing, and says so
    assert [row["variant"] for row in learns] == ["as of 4 Dec", "cuDNN attention off"]
    assert {row["sdpa_backends"] is None for row in learns} == {True, False} and all(v in VARIANTS for v in
                                                                                   (r["variant"] for r in learns))
    assert all(row["steps"] == 3 and row["nonfinite_steps"] == 0 and row["grad_norm_median"] > 0 for row in learns)
    assert "no single change makes the step as of 4 Dec learn" in (out / "learns.md").read_text()
    pretraining = [row for row in objectives if "steps" in row and "learned" in row]
    assert [row["run"] for row in pretraining] == ["mlm/compiled/32", "mlm/eager/32"]
    assert all(row["steps"] == 3 and row["learned"] is False for row in pretraining)
    assert "metrics" in objectives[-1] and "majority_baseline" in objectives[-1]  # the fine-tuning run on CoNLL
    throughput = json.loads(archive_text(out, "./throughput.jsonl").splitlines()[-1])
    launch = json.loads(archive_text(out, "./launch.jsonl"))["rows"]  # one process, then two sharing the device
    assert [(row["processes"], row["aggregate_tokens_per_s"] > 0) for row in launch] == [(1, True), (2, True)]
    train = json.loads(archive_text(out, "./train/summary.json"))
    assert "./study/ar/seed22/finetune/conll2003-full/results.json" in names
    # armlm's compiled step only: HF's models beside it are tests/test_bench.py's (the lease runs all of them)
    assert {row["model"] for row in throughput["rows"]} == {"armlm ar"}
    assert train["steps"] == 3 and train["mfu"] is None and "learned" in train  # no peak on a CPU
    assert "ms of CPU time listed per step against" in archive_text(out, "./runs/profile.log")


@pytest.mark.slow
def test_a_module_the_parts_import_that_does_not_import_stops_the_lease_in_one_line(tmp_path, data_dir):
    """seqeval present but broken (as a wheel built for another numpy would be): the check imports, not only finds,
    what the parts need, names it, and no part starts."""
    broken = tmp_path / "site" / "seqeval"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('built for another numpy')\n")
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "PYTHON": sys.executable, "ARMLM_DATA_DIR": str(data_dir),
           "PYTHONPATH": str(tmp_path / "site")}
    done = subprocess.run(["bash", "bench/gpu_lease.sh", "--dry-run"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert (out / "parts.txt").read_text() == ("setup: seqeval.metrics armlm.finetune.run not importable; "
                                               "bash bench/gpu_lease_prepare.sh carries them\n")
    device = (out / "device.txt").read_text()
    assert "torch 2." in device and "armlm " in device  # the versions, from the same process
