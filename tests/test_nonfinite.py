"""A NaN/inf training loss: stop naming the step and keeping the last good checkpoint, or skip the batch."""

from __future__ import annotations

import pytest
import torch

from armlm.objectives.mlm import MaskedLM
from armlm.training.nonfinite import NonFiniteLossError
from armlm.training.run import run_pretraining
from tests.helpers.configs import tiny_config


def spoil_training_losses(monkeypatch, calls: set[int], factor: float) -> None:
    """MLM's training loss times `factor` (nan or inf) at the given 1-based training calls."""
    real_loss = MaskedLM.loss
    count = {"n": 0}

    def spoiled(self, batch, model, generator=None):
        out = real_loss(self, batch, model, generator)
        if model.training and torch.is_grad_enabled():  # a training step, not train.py's no-grad FLOPs probe
            count["n"] += 1
            if count["n"] in calls:
                out.loss = out.loss * factor
        return out

    monkeypatch.setattr(MaskedLM, "loss", spoiled)


@pytest.mark.slow
def test_nan_loss_stops_with_the_step_and_keeps_the_last_checkpoint(tmp_path, cache_dir, monkeypatch):
    cfg = tiny_config(tmp_path, cache_dir, "objective=mlm", "trainer.max_steps=12")
    spoil_training_losses(monkeypatch, {7}, float("nan"))  # step index 6, after the step-4 checkpoint
    last = tmp_path / "checkpoints" / "last.ckpt"
    with pytest.raises(NonFiniteLossError, match=r"at step 6 .*last finite loss \d"):
        run_pretraining(cfg)
    checkpoint = torch.load(last, weights_only=True)
    assert checkpoint["global_step"] == 4
    assert all(torch.isfinite(t).all() for t in checkpoint["state_dict"].values())


@pytest.mark.slow
def test_nonfinite_loss_skip_leaves_the_weights_alone_and_counts_the_batch(tmp_path, cache_dir, monkeypatch):
    cfg = tiny_config(tmp_path, cache_dir, "objective=mlm", "trainer.max_steps=8", "nonfinite_loss=skip",
                      "trainer.log_every_n_steps=1")
    spoil_training_losses(monkeypatch, {3, 6}, float("inf"))
    summary = run_pretraining(cfg)
    assert summary["metrics"]["train/skipped_batches"] == 2
    assert summary["tokens_seen"] == 6 * 8 * 32  # the two skipped batches trained nothing
    checkpoint = torch.load(summary["last_checkpoint"], weights_only=True)
    assert checkpoint["skipped_batches"] == 2
    steps = {int(state["step"]) for state in checkpoint["optimizer_states"][0]["state"].values()}
    assert steps == {6}  # AdamW updated the weights 6 times in 8 steps
    assert all(torch.isfinite(t).all() for t in checkpoint["state_dict"].values())


def test_nonfinite_loss_must_be_stop_or_skip(tmp_path, cache_dir):
    with pytest.raises(ValueError, match="nonfinite_loss=.ignore.: expected one of"):
        run_pretraining(tiny_config(tmp_path, cache_dir, "nonfinite_loss=ignore"))
