"""`trainer=ddp` through Hydra: Lightning relaunches train.py once per rank; both ranks must share one run
folder and the token accounting must sum over ranks. Two CPU processes (gloo) stand in for two GPUs."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def test_two_process_ddp_run_shares_one_folder_and_counts_both_ranks(tmp_path, cache_dir):
    run_dir = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, "train.py", "experiment=smoke", "objective=mlm", "trainer=ddp", "trainer.accelerator=cpu",
         "trainer.devices=2", "trainer.precision=32-true", "trainer.max_steps=6", "trainer.val_check_interval=3",
         "trainer.enable_progress_bar=false", f"data.cache_dir={cache_dir}", f"hydra.run.dir={run_dir}"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 6
    assert summary["tokens_seen"] == 2 * 6 * 8 * 64  # two ranks x steps x batch x block
    assert [p.name for p in tmp_path.iterdir()] == ["run"]  # no second folder from the relaunched rank
