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


@pytest.mark.slow
def test_the_lease_scripts_dry_run_runs_every_part_and_returns_one_archive(tmp_path, data_dir):
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "PYTHON": sys.executable, "WALL": "900", "ARMLM_DATA_DIR": str(data_dir)}
    done = subprocess.run(["bash", "bench/gpu_lease.sh", "--dry-run"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    parts = (out / "parts.txt").read_text()
    for name in ("learns", "objectives", "cuda-tests", "throughput", "study-ar"):
        assert f"{name}: rc=0," in parts, parts
    returned = sorted(p.name for p in out.iterdir())
    assert returned == ["device.txt", "learns.md", "lease.tar.gz", "objectives.md", "parts.txt"]
    with tarfile.open(out / "lease.tar.gz") as archive:
        names = archive.getnames()
        assert not any(name.endswith(".ckpt") or "events.out" in name for name in names)
        learns = [json.loads(line) for line in archive.extractfile("./learns.jsonl").read().decode().splitlines()]
        objectives = [json.loads(line) for line in archive.extractfile("./objectives.jsonl").read().decode().splitlines()]
    # every variant ran its steps and measured its gradients; a 3-step run learns nothing, and says so
    assert [row["variant"] for row in learns] == list(VARIANTS)
    assert all(row["steps"] == 3 and row["nonfinite_steps"] == 0 and row["grad_norm_median"] > 0 for row in learns)
    assert "no single change makes the step as of 4 Dec learn" in (out / "learns.md").read_text()
    pretraining = [row for row in objectives if "steps" in row and "learned" in row]
    assert [row["run"] for row in pretraining] == ["mlm/compiled/32", "mlm/eager/32", "mlm/compiled/64", "mlm/eager/64"]
    assert all(row["steps"] == 3 and row["learned"] is False for row in pretraining)
    assert "metrics" in objectives[-1] and "majority_baseline" in objectives[-1]  # the fine-tuning run on CoNLL
    assert "./study/ar/seed22/finetune/conll2003-full/results.json" in names
