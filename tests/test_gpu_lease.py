"""bench/gpu_lease.sh --dry-run: every part of the lease's one call at smoke size on the CPU (the baseline checkout's
throughput included, from a `git archive` of 54b17a1 as the lease carries it), each part's exit status in parts.txt."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BASELINE = "54b17a1"


def has_commit(commit: str) -> bool:
    return subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=REPO, capture_output=True).returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(not has_commit(BASELINE), reason=f"the checkout's history lacks the baseline {BASELINE}")
def test_the_lease_scripts_dry_run_runs_every_part(tmp_path):
    archive, out = tmp_path / "baseline.tar", tmp_path / "out"
    subprocess.run(["git", "archive", BASELINE, "-o", str(archive), "--", ".", ":!records", ":!docs", ":!tests",
                    ":!notebooks"], cwd=REPO, check=True)
    env = {**os.environ, "OUT": str(out), "PYTHON": sys.executable, "BASELINE_TAR": str(archive), "WALL": "900"}
    done = subprocess.run(["bash", "bench/gpu_lease.sh", "--dry-run"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    parts = (out / "parts.txt").read_text()
    for name in ("throughput-small-54b17a1", "throughput-small-head", "throughput-small-compiled-head", "profile",
                 "train", "study-ar"):
        assert f"{name}: rc=0," in parts, parts
    results = [json.loads(line) for line in (out / "throughput.jsonl").read_text().splitlines()]
    assert len(results) == 3 and all(r["rows"] for r in results)
    assert [r["config"]["compile"] for r in results] == [False, False, True]
    summary = json.loads((out / "train" / "summary.json").read_text())
    assert summary["steps"] == 3 and summary["mfu"] is None  # no peak on a CPU
    assert "first training step" in (out / "train.log").read_text()
    assert (out / "study" / "ar" / "seed22" / "finetune").is_dir()
