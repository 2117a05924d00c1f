"""training.setup: the process settings that change speed, not numbers (glibc keeps a step's memory), and the run
folder a command writes into (ckpt_path=last resumes it; a fresh run never writes over another)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from lightning.pytorch.plugins.environments import SLURMEnvironment
from omegaconf import OmegaConf

from armlm.common.errors import ArmlmError
from armlm.finetune.command import finetune
from armlm.training.run import pretrain
from armlm.training.setup import refuse_writing_over_a_run, resolve_last_checkpoint
from tests.helpers.configs import composed_config

REPO = Path(__file__).resolve().parents[1]

# Allocates and frees a 64 MB tensor (above glibc's largest dynamic mmap threshold, 32 MB) 8 times and
# prints the page faults of the last 3 rounds: each fresh 4 KB page is one.
FAULTS_PER_ROUND = """
import json, resource, sys, torch
sys.path.insert(0, {repo!r})
from armlm.training.setup import keep_large_allocations_on_the_heap
if {keep}:
    keep_large_allocations_on_the_heap()
faults = []
for _ in range(8):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    block = torch.empty(16 * 1024 * 1024).fill_(1.0)
    del block
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps(faults[-3:]))  # the steady state: the first rounds may still grow the heap
"""


def faults_per_round(keep: bool, **environment: str) -> list[int]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    env.update(environment)
    out = subprocess.run([sys.executable, "-c", FAULTS_PER_ROUND.format(repo=str(REPO), keep=keep)], env=env,
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.slow  # subprocesses that start torch
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc settings are Linux-only")
def test_a_freed_large_tensor_is_reused_without_page_faults():
    page_count = 64 * 1024 * 1024 // 4096
    assert min(faults_per_round(keep=False)) > page_count // 2  # glibc's default: a fresh mmap every time
    assert max(faults_per_round(keep=True)) < page_count // 100  # kept on the heap, neither unmapped nor trimmed


@pytest.mark.slow  # subprocesses that start torch
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc settings are Linux-only")
@pytest.mark.parametrize("environment", [
    {"MALLOC_MMAP_MAX_": "65536", "MALLOC_TRIM_THRESHOLD_": "131072"},
    {"GLIBC_TUNABLES": "glibc.malloc.mmap_max=65536:glibc.malloc.trim_threshold=131072"},
], ids=["malloc-variables", "glibc-tunables"])
def test_the_environments_malloc_settings_win(environment):
    # glibc's defaults, asked for explicitly: the fresh mmap every round comes back. (This pattern cannot show the
    # trim threshold alone: a lone 64 MB block freed is not trimmed here even at glibc's default.)
    assert min(faults_per_round(keep=True, **environment)) > 64 * 1024 * 1024 // 4096 // 2


def test_a_fresh_run_is_refused_where_another_left_its_last_checkpoint_and_the_folder_is_kept(tmp_path, monkeypatch):
    """A second `armlm train ... hydra.run.dir=<a finished run>` trained afresh over it, with a warning, and wrote over
    its last.ckpt and summary.json (probed on 5 December). Now it stops before any work, naming both ways on; a
    resume, a folder with no last.ckpt (Lightning numbers a second best-*.ckpt) and a SLURM requeue go on."""
    cfg = OmegaConf.create({"output_dir": str(tmp_path), "ckpt_path": None})
    refuse_writing_over_a_run(cfg)
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "best-step8.ckpt").write_bytes(b"best")
    refuse_writing_over_a_run(cfg)
    (tmp_path / "checkpoints" / "last.ckpt").write_bytes(b"last")
    (tmp_path / "summary.json").write_text("{}")
    for command in ("train", "finetune"):
        composed = composed_config(command, [f"output_dir={tmp_path}", *(["task=rte", "pretrained=/a/run"]
                                                                          if command == "finetune" else [])])
        with pytest.raises(ArmlmError, match=rf"^{re.escape(str(tmp_path))} already holds a run \(checkpoints/last.ckpt\).*resume "
                                             r"it with ckpt_path=last, or give this run a folder of its own"):
            {"train": pretrain, "finetune": finetune}[command](composed)
    assert (tmp_path / "checkpoints" / "last.ckpt").read_bytes() == b"last"
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["best-step8.ckpt", "checkpoints", "last.ckpt", "summary.json"]
    resumed = OmegaConf.create({"output_dir": str(tmp_path), "ckpt_path": "last"})
    resolve_last_checkpoint(resumed)
    refuse_writing_over_a_run(resumed)
    assert resumed.ckpt_path == str(tmp_path / "checkpoints" / "last.ckpt")
    (tmp_path / "hpc_ckpt_1.ckpt").write_bytes(b"requeued")  # resumed by Lightning itself under SLURM only
    with pytest.raises(ArmlmError, match="already holds a run"):
        refuse_writing_over_a_run(cfg)
    monkeypatch.setattr(SLURMEnvironment, "detect", staticmethod(lambda: True))
    refuse_writing_over_a_run(cfg)
