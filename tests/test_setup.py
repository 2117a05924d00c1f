"""training.setup's process settings that change speed, not numbers: glibc keeps a step's memory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

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
