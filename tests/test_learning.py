"""A run that learns nothing says so (issue 82): a NaN/inf gradient norm stops it with every checkpoint intact, a run
whose held-out loss ends above its unigram baseline is marked learned: false, train/grad_norm is logged, and
trainer.step's attention kernels and optimiser reach torch. The device tests run on the CPU, and on CUDA where there
is one (bench/gpu_lease.sh runs them on a lent GPU with -k cuda)."""

from __future__ import annotations

import json
import logging

import pytest
import torch
from lightning.pytorch.callbacks import Callback

from armlm.common.errors import ArmlmError
from armlm.training.nonfinite import NonFiniteGradientError
from armlm.training.run import run_pretraining
from tests.helpers.configs import tiny_config
from tests.helpers.learning import (
    SpoilGradients,
    assert_checkpoints_all_at,
    logged_scalars,
    with_callbacks,
    write_learnable_corpus,
)

pytestmark = pytest.mark.slow
CUDA = ("trainer=gpu", "trainer.step.loader_workers=0", "trainer.step.pin_memory=false", "trainer.precision=bf16-mixed")
DEVICES = [pytest.param((), id="cpu"),
           pytest.param(CUDA, id="cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA"))]
# 40 steps of AR on a learnable corpus: the tiny model ends about 2 nats below its unigram baseline
LEARNS = ("objective=ar", "trainer.max_steps=40", "trainer.val_check_interval=20", "optim.lr=3e-3")


@pytest.fixture(scope="module")
def learnable(tmp_path_factory) -> tuple[str, ...]:
    return (*LEARNS, *write_learnable_corpus(tmp_path_factory.mktemp("learnable")))


@pytest.mark.parametrize("device", DEVICES)
def test_a_normal_run_learns_and_logs_its_gradient_norm(tmp_path, cache_dir, device, learnable):
    summary = run_pretraining(tiny_config(tmp_path, cache_dir, *learnable, *device))
    assert summary["learned"] is True and summary["own_below_unigram"]["all"] > 0
    assert summary["val_loss"] < summary["unigram_baseline"]
    assert json.loads((tmp_path / "summary.json").read_text())["learned"] is True
    norms = logged_scalars(tmp_path, "train/grad_norm")
    assert len(norms) == 40 // 2 and all(0 < n < float("inf") for n in norms)  # every trainer.log_every_n_steps=2
    losses = logged_scalars(tmp_path, "train/loss")
    assert losses[-1] < losses[0] - 0.5


@pytest.mark.parametrize("device", DEVICES)
def test_zero_gradients_end_with_learned_false_and_one_warning(tmp_path, cache_dir, device, monkeypatch, caplog,
                                                             learnable):
    with_callbacks(monkeypatch, SpoilGradients(at=0, zero=True))
    with caplog.at_level(logging.WARNING, logger="armlm.train"):
        summary = run_pretraining(tiny_config(tmp_path, cache_dir, *learnable, *device))
    assert summary["learned"] is False and summary["own_below_unigram"]["all"] <= 0
    assert json.loads((tmp_path / "summary.json").read_text())["learned"] is False
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and r.name == "armlm.train"]
    assert len(warnings) == 1 and "this run did not learn" in warnings[0].getMessage()
    assert "\n" not in warnings[0].getMessage() and not warnings[0].exc_info
    assert set(logged_scalars(tmp_path, "train/grad_norm")) == {0.0}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "deferred-reads"])
@pytest.mark.parametrize("device", DEVICES)
def test_an_infinite_gradient_stops_the_run_before_any_checkpoint_holds_its_weights(tmp_path, cache_dir, device,
                                                                                   compiled, monkeypatch):
    """Eagerly on a CPU the norm is read at once; a compiled step (or any GPU step) reads it at the next logging step
    or checkpoint: either way the step is named and the checkpoint of step 4 is the last one."""
    torch._dynamo.reset()
    with_callbacks(monkeypatch, SpoilGradients(at=5))
    step = ("trainer.step.compile=true", "trainer.step.compile_backend=aot_eager") if compiled else (
        "trainer.step.compile=false",)
    cfg = tiny_config(tmp_path, cache_dir, "objective=mlm", "trainer.max_steps=12", *device, *step)
    with pytest.raises(NonFiniteGradientError, match=r"gradient norm was (inf|NaN/inf) at step 5 .*last saved "
                                                     r"checkpoint is intact. Likely causes: .*sdpa_backends"):
        run_pretraining(cfg)
    assert_checkpoints_all_at(tmp_path / "checkpoints", step=4)
    assert not (tmp_path / "summary.json").exists()


def test_sdpa_backends_reach_torch_during_the_run_and_are_restored_after(tmp_path, cache_dir, monkeypatch):
    seen = []

    class Spy(Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            seen.append((torch.backends.cuda.cudnn_sdp_enabled(), torch.backends.cuda.flash_sdp_enabled(),
                         torch.backends.cuda.math_sdp_enabled(), trainer.optimizers[0].defaults["fused"]))

    with_callbacks(monkeypatch, Spy())
    assert torch.backends.cuda.cudnn_sdp_enabled()
    run_pretraining(tiny_config(tmp_path, cache_dir, "trainer.max_steps=2", "trainer.step.fused_adamw=false",
                                "trainer.step.sdpa_backends=[flash,efficient,math]"))
    assert seen == [(False, True, True, False)] * 2
    assert torch.backends.cuda.cudnn_sdp_enabled()  # restored


def test_trainer_gpu_leaves_cudnn_attention_out():
    from tests.helpers.configs import composed_config
    step = composed_config("train", ["trainer=gpu"]).trainer.step
    assert "cudnn" not in step.sdpa_backends
    assert composed_config("finetune", ["trainer=gpu", "task=conll2003", "pretrained=x"]).trainer.step.sdpa_backends == step.sdpa_backends


def test_an_unknown_sdpa_backend_is_one_clear_error(tmp_path, cache_dir):
    with pytest.raises(ArmlmError, match=r"sdpa_backends=\['fast'\]; choose some of \['flash', 'efficient', 'cudnn'"):
        run_pretraining(tiny_config(tmp_path, cache_dir, "trainer.max_steps=1", "trainer.step.sdpa_backends=[fast]"))


def test_a_gradient_stop_ends_armlm_train_in_one_line():
    """The command's one-line errors take it (a subclass of the NaN loss's), so it prints no traceback."""
    from armlm.commands import COMMANDS
    from armlm.common.commands import error_types
    assert issubclass(NonFiniteGradientError, error_types(COMMANDS["train"]))
    assert not issubclass(RuntimeError, error_types(COMMANDS["train"]))
