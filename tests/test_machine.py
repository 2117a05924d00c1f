"""common.machine: the one process setting that changes speed, not numbers (glibc keeps a step's memory on the heap),
and a bench process that starts without Lightning."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Twelve training steps of a small model (2 layers, d_model 128, a 1,024-token head, 32 x 64 tokens: 8 MB of logits)
# with AdamW; prints the page faults of each of the last six, the steady state (each fresh 4 KB page is one). A real
# step, not one block freed and taken again: alone in a fresh process, a same-size aligned block does not fit the hole
# its predecessor left and grows the heap anew for rounds (glibc's fragmentation, not trimming), and whether it did
# depended on what else the process had imported.
STEP_FAULTS = """
import json, resource, sys, torch
sys.path.insert(0, {repo!r})
from armlm.common.machine import keep_large_allocations_on_the_heap
from armlm.models.attention import BIDIRECTIONAL
from armlm.models.backbone import ModelConfig, Transformer
if {keep}:
    keep_large_allocations_on_the_heap()
torch.manual_seed(0)
model = Transformer(ModelConfig(vocab_size=1024, d_model=128, n_layers=2, n_heads=2, d_ff=512, max_len=64))
head = torch.nn.Linear(128, 1024)
optimizer = torch.optim.AdamW([*model.parameters(), *head.parameters()])
tokens = torch.randint(0, 1024, (32, 64))
faults = []
for _ in range(12):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    logits = head(model(tokens, attention=BIDIRECTIONAL))
    torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens.flatten()).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del logits
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps(faults[-6:]))
"""


def step_faults(keep: bool, **environment: str) -> int:
    """Page faults over the last six of twelve training steps, in a fresh process."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    env.update(environment)
    out = subprocess.run([sys.executable, "-c", STEP_FAULTS.format(repo=str(REPO), keep=keep)], env=env,
                         capture_output=True, text=True, check=True).stdout
    return sum(json.loads(out.strip().splitlines()[-1]))


PAGES = 2048  # 8 MB: one step's logits


@pytest.mark.slow  # subprocesses that start torch
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc settings are Linux-only")
def test_a_training_steps_memory_is_reused_without_page_faults():
    """Both sides under glibc's default mmap threshold held where it starts (128 KiB). Left to itself the threshold
    moves with what is freed, so the bare default faulted anywhere from 2,016 pages over six steps (a CI run) to
    28,000: no bound to test a setting that does nothing against. Held, every step maps its large blocks afresh
    (about 264,000 pages over six steps, measured twice), and kept on the heap they come back (1-4,097 measured)."""
    held = {"MALLOC_MMAP_THRESHOLD_": "131072"}
    assert step_faults(keep=False, **held) > 60 * PAGES
    assert step_faults(keep=True, **held) < 6 * PAGES  # neither unmapped nor trimmed


@pytest.mark.slow  # subprocesses that start torch
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc settings are Linux-only")
@pytest.mark.parametrize("environment", [
    {"MALLOC_MMAP_MAX_": "65536", "MALLOC_TRIM_THRESHOLD_": "131072"},
    {"GLIBC_TUNABLES": "glibc.malloc.mmap_max=65536:glibc.malloc.trim_threshold=131072"},
], ids=["malloc-variables", "glibc-tunables"])
def test_the_environments_malloc_settings_win(environment):
    # glibc's default values, asked for explicitly (a fixed mmap threshold): every step maps its large blocks afresh
    assert step_faults(keep=True, **environment) > 6 * PAGES


@pytest.mark.slow  # a process that starts Python
def test_the_benches_that_time_a_step_start_without_lightning():
    """Their processes (bench/launch_bound.py starts one per share of the device, each timed against its setting's
    timeout) build the model, objective and optimiser from configs: torch and Hydra, not Lightning's seconds of
    imports (training.setup, training.optim and common.machine keep it out)."""
    probe = ("import sys\nsys.path.insert(0, {repo!r})\nimport bench.launch_bound, bench.step_profile, bench.throughput\n"
             "print(sorted(m for m in ('lightning', 'torchmetrics') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe.format(repo=str(REPO))], capture_output=True, text=True,
                         check=True, cwd=REPO).stdout
    assert out.strip().splitlines()[-1] == "[]"
