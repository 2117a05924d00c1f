"""A compiled training step reads nothing back to the host inside a step: the loss's finiteness, the budget counts
and the logged scalars are read once per trainer.log_every_n_steps (and at checkpoints), and the run trains as the
eager one does. On CUDA the steps also run under torch.cuda.set_sync_debug_mode("error")."""

from __future__ import annotations

import pytest
import torch
from lightning.pytorch.callbacks import Callback

from armlm.objectives.mlm import MaskedLM
from armlm.training.callbacks import TokenAccounting
from armlm.training.lit_module import PretrainModule
from armlm.training.nonfinite import NonFiniteLossError
from armlm.training.run import run_pretraining
from tests.helpers.configs import tiny_config
from tests.helpers.learning import LearningProbe, logged_scalars, with_callbacks

COMPILED = ("trainer.step.compile=true", "trainer.step.compile_backend=aot_eager")


def counting_reads(monkeypatch) -> list[int]:
    """Every read of TokenAccounting's device counts that found something to read."""
    reads: list[int] = []
    real = TokenAccounting._read

    def read(self):
        if self._pending is not None:
            reads.append(1)
        real(self)

    monkeypatch.setattr(TokenAccounting, "_read", read)
    return reads


@pytest.mark.slow
def test_a_compiled_run_trains_as_the_eager_one_and_reads_once_per_logging_step(tmp_path, cache_dir, monkeypatch):
    # masked LM over padded segment pairs would read its input tokens too; blocks of MLM: masks drawn per step
    with_callbacks(monkeypatch, LearningProbe(at=1))  # each run trains: non-zero gradients, every weight moved
    eager = run_pretraining(tiny_config(tmp_path / "eager", cache_dir, "objective=mlm", "trainer.log_every_n_steps=4"))
    held_out = logged_scalars(tmp_path / "eager", "val/loss")  # after steps 4 and 8, on the same blocks
    assert held_out[-1] < held_out[0]  # the reference learns: a run that did not would compare equal too
    reads = counting_reads(monkeypatch)
    compiled = run_pretraining(tiny_config(tmp_path / "compiled", cache_dir, "objective=mlm",
                                           "trainer.log_every_n_steps=4", *COMPILED))
    # the same seeded draws (one global stream per step) and weights: the same run, up to float rounding
    assert compiled["tokens_seen"] == eager["tokens_seen"] and compiled["steps"] == eager["steps"] == 8
    assert compiled["pred_tokens_seen"] == eager["pred_tokens_seen"]
    assert compiled["val_loss"] == pytest.approx(eager["val_loss"], rel=1e-4)
    assert compiled["flops_seen"] >= eager["flops_seen"]  # every row's work: the head runs at every position
    # 8 steps logged every 4th: two logging reads, the checkpoints' and the summary's, never one a step
    assert 1 <= len(reads) <= 5
    norms = logged_scalars(tmp_path / "compiled", "train/grad_norm")
    assert len(norms) == 2 and all(0 < n < float("inf") for n in norms)
    assert norms == pytest.approx(logged_scalars(tmp_path / "eager", "train/grad_norm"), rel=1e-3)


class SpoilAt(Callback):
    """Gives every batch a factor for its training loss, NaN from batch `index` on: an input of the compiled step."""

    def __init__(self, index: int) -> None:
        self.index = index

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        batch["spoil"] = torch.tensor(float("nan") if batch_idx >= self.index else 1.0)


@pytest.mark.slow
def test_a_nan_loss_in_a_compiled_step_stops_before_any_checkpoint_holds_its_weights(tmp_path, cache_dir,
                                                                                     monkeypatch):
    real_loss = MaskedLM.loss

    def spoiled(self, batch, model, generator=None):
        out = real_loss(self, batch, model, generator)
        out.loss = out.loss * batch.get("spoil", 1.0)
        return out

    monkeypatch.setattr(MaskedLM, "loss", spoiled)
    torch._dynamo.reset()  # a graph traced through the unpatched loss by an earlier test is not reused
    with_callbacks(monkeypatch, SpoilAt(5))
    cfg = tiny_config(tmp_path, cache_dir, "objective=mlm", "trainer.max_steps=12", *COMPILED)
    with pytest.raises(NonFiniteLossError, match=r"loss was NaN/inf at step 5 .*last saved checkpoint is intact"):
        run_pretraining(cfg)
    checkpoint = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    assert checkpoint["global_step"] == 4  # the validation before the NaN; none after it
    assert all(torch.isfinite(t).all() for t in checkpoint["state_dict"].values())


def test_skip_is_refused_for_a_compiled_step():
    model = {"vocab_size": 64, "max_len": 32, "d_model": 32, "n_layers": 1, "n_heads": 2, "d_ff": 64}
    with pytest.raises(ValueError, match="nonfinite_loss=skip reads every step's loss on the host"):
        PretrainModule(model=model, objective={"_target_": "armlm.objectives.mlm.MaskedLM"}, optim={},
                       compile_step={"mode": "default", "backend": "aot_eager"}, nonfinite_loss="skip")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="sync debug mode is CUDA's; the CPU proof is the one graph "
                                                          "of tests/test_compiled_step.py")
def test_compiled_steps_on_cuda_never_synchronise(tmp_path, cache_dir, monkeypatch):
    cfg = tiny_config(tmp_path, cache_dir, "objective=mlm", "trainer=gpu", "trainer.precision=bf16-mixed",
                      "trainer.step.loader_workers=0", "trainer.log_every_n_steps=1000", "trainer.max_steps=12",
                      "trainer.val_check_interval=12")

    class SyncGuard(Callback):  # steps 3-10: after the warm-up's compilation, before the last step's checks
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            torch.cuda.set_sync_debug_mode("error" if 3 <= batch_idx <= 10 else "default")

    with_callbacks(monkeypatch, SyncGuard(), LearningProbe(at=11))  # outside the guarded steps: it reads gradients
    try:
        summary = run_pretraining(cfg)
        assert summary["steps"] == 12
        norms = logged_scalars(tmp_path, "train/grad_norm")  # the last step's, where the logger wrote
        assert norms and all(0 < n < float("inf") for n in norms)
    finally:
        torch.cuda.set_sync_debug_mode("default")


@pytest.mark.slow
def test_a_token_budget_over_padded_batches_ends_at_the_eager_runs_step(tmp_path, cache_dir):
    """Segment pairs are padded, so their input tokens are a device count: read where the budget could be spent."""
    budget = ("objective=mlm_nsp", "max_tokens=1500", "trainer.max_steps=-1")
    eager = run_pretraining(tiny_config(tmp_path / "eager", cache_dir, *budget))
    compiled = run_pretraining(tiny_config(tmp_path / "compiled", cache_dir, *budget, *COMPILED))
    assert compiled["steps"] == eager["steps"] and compiled["tokens_seen"] == eager["tokens_seen"] >= 1500
    assert compiled["pred_tokens_seen"] == eager["pred_tokens_seen"]
