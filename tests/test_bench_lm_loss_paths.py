"""bench/lm_loss_paths.py times both underflow forms on one block, after checking they give the same NLL."""

from __future__ import annotations

import bench.lm_loss_paths as lm_loss_paths


def test_both_forms_are_timed_beside_the_blocks_softmax(capsys):
    result = lm_loss_paths.main(["--rows", "8", "--vocab", "50", "--rounds", "3"])
    out = capsys.readouterr().out
    assert all(result[f"{name}_ms"] > 0 for name in ("softmax", "branching", "branch_free"))
    assert result["ratio_q1"] <= result["ratio_median"] <= result["ratio_q3"]
    assert "| branch-free (GPU, compiled) |" in out and out.strip().splitlines()[-1].startswith("{")
