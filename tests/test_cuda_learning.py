"""On CUDA, through `trainer=gpu` as a user runs it: every objective config learns (issue 82: on an H200 the compiled
MLM step once ended at its initial loss and exited 0). The CPU's learning checks are tests/test_learning.py."""

from __future__ import annotations

import pytest
import torch

from bench.objective_cases import objective_names
from bench.objectives_learn import run_all

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="needs a CUDA device: trainer=gpu's kernels (cuDNN, flash, inductor's) run there "
                                       "only; bench/gpu_lease.sh runs this on a lent GPU")
MARGIN = 0.5  # nats below its own unigram baseline


def test_every_objective_learns_through_trainer_gpu_compiled(tmp_path):
    rows = run_all(objective_names(), blocks=[64], batch=32, tokens=2_200_000, modes=["compiled"], parallel=13,
                   extra=[], out=tmp_path)
    failed = {row["run"]: row["error"] for row in rows if "error" in row}
    assert not failed
    short = {row["run"]: row["own_margin"] for row in rows if not row["learned"] or row["own_margin"] < MARGIN}
    assert not short, f"ended less than {MARGIN} nats below their own unigram baseline: {short}"
