"""Tiny end-to-end runs of train.py for every objective: logging, token budget, checkpoints, resume, NaN stop."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch._inductor.config
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from armlm.common.errors import ArmlmError
from armlm.common.provenance import armlm_commit
from armlm.common.vocabulary import Vocabulary
from armlm.models.attention import BIDIRECTIONAL
from armlm.objectives.mlm import MaskedLM
from armlm.training import setup as training_setup
from armlm.training.lit_module import PretrainModule
from armlm.training.preflight import check_config
from armlm.training.run import run_pretraining
from tests.helpers.configs import composed_config, tiny_config
from tests.helpers.learning import LearningProbe, logged_scalars, with_callbacks

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def test_the_last_step_validates_and_checkpoints_even_off_the_interval(tmp_path, cache_dir):
    summary = run_pretraining(tiny_config(tmp_path, cache_dir, "objective=mlm", "trainer.max_steps=7"))
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    # Lightning logs validation at the index of the batch it follows: after steps 4 and 7 -> 3 and 6.
    assert [e.step for e in events.Scalars("val/loss")] == [3, 6]
    assert torch.load(summary["last_checkpoint"], weights_only=True)["global_step"] == 7


def test_bf16_autocast_run_on_cpu(tmp_path, cache_dir, monkeypatch):
    with_callbacks(monkeypatch, LearningProbe(at=2))  # non-zero finite gradients at step 2, every weight moved
    summary = run_pretraining(tiny_config(tmp_path, cache_dir, "objective=mlm_nsp", "trainer.precision=bf16-mixed"))
    assert torch.isfinite(torch.tensor(summary["val_loss"]))
    held_out = logged_scalars(tmp_path, "val/loss")  # after steps 4 and 8, on the same blocks
    assert held_out[-1] < held_out[0]
    # the precision it ran at, which depends on the machine, is in the written summary
    written = json.loads((tmp_path / "summary.json").read_text())
    assert written["precision"] == ("bf16-mixed" if training_setup.cpu_has_bf16_units() else "32-true")
    assert written["code"] == armlm_commit()  # the commit (+dirty) that ran it
    checkpoint = torch.load(summary["last_checkpoint"], weights_only=True)
    assert all(t.dtype == torch.float32 for t in checkpoint["state_dict"].values() if t.is_floating_point())


def test_cpus_without_bf16_units_fall_back_to_fp32(tmp_path, cache_dir, monkeypatch):
    monkeypatch.setattr(training_setup, "cpu_has_bf16_units", lambda: False)
    cfg = tiny_config(tmp_path, cache_dir, "trainer.precision=bf16-mixed")
    training_setup.choose_cpu_precision(cfg)
    assert cfg.trainer.precision == "32-true"
    monkeypatch.setattr(training_setup, "cpu_has_bf16_units", lambda: True)
    cfg = tiny_config(tmp_path, cache_dir, "trainer.precision=bf16-mixed")
    training_setup.choose_cpu_precision(cfg)
    assert cfg.trainer.precision == "bf16-mixed"


@pytest.mark.parametrize("precision", ["16-mixed", "16"])
def test_fp16_autocast_on_a_cpu_is_refused_not_run_as_bf16(tmp_path, cache_dir, precision):
    """Lightning turned 16-mixed on a CPU into bf16-mixed with a warning, and the summary recorded 16-mixed: refused by
    the command's check (a study's launch runs it) and where the run sets its precision."""
    from armlm.finetune.preflight import check_config as check_finetune

    line = rf"^trainer.precision={precision}: fp16 autocast needs a GPU"
    cfg = tiny_config(tmp_path, cache_dir, f"trainer.precision={precision}")
    for refuses in (check_config, training_setup.choose_cpu_precision):
        with pytest.raises(ArmlmError, match=line):
            refuses(cfg)
    with pytest.raises(ArmlmError, match=line):
        check_finetune(composed_config("finetune", ["task=rte", "pretrained=/some/run", f"trainer.precision={precision}"]))


def test_a_trainer_left_to_choose_its_accelerator_runs_on_the_cpu_where_there_is_no_gpu(tmp_path, cache_dir, monkeypatch):
    """accelerator=auto (Lightning's default) on a machine without a GPU is a CPU run: its precision is chosen as
    accelerator=cpu's is (16-mixed refused, bf16 falling back to fp32 without bf16 units)."""
    auto = tiny_config(tmp_path, cache_dir, "trainer.accelerator=auto", "trainer.precision=16-mixed")
    monkeypatch.setattr(training_setup, "device_present", lambda kind: False)
    with pytest.raises(ArmlmError, match="^trainer.precision=16-mixed: fp16 autocast needs a GPU"):
        training_setup.choose_cpu_precision(auto)
    monkeypatch.setattr(training_setup, "device_present", lambda kind: True)
    training_setup.choose_cpu_precision(auto)  # a GPU's: Lightning runs it there
    assert auto.trainer.precision == "16-mixed"


def test_save_at_tokens_leaves_a_loadable_checkpoint_part_way_and_records_the_trained_length(tmp_path, cache_dir):
    summary = run_pretraining(tiny_config(tmp_path, cache_dir, "objective=ar", "max_tokens=2048", "trainer.max_steps=1000",
                                    "save_at_tokens=[1000]"))
    assert summary["tokens_seen"] == 2048 and summary["val_loss_kind"] == "next_token"
    assert summary["val_likelihood_tag"] == "val/loss" and summary["val_likelihood"] == summary["val_loss"]
    part_way = torch.load(tmp_path / "checkpoints" / "tokens-1000.ckpt", weights_only=True)
    assert part_way["global_step"] == 4  # the first step at which 4 x 256 >= 1000 input tokens were seen
    assert part_way["trained_length"] == 32 and part_way["tokenizer_json"]  # fine-tuning reads both
    # The data position lives with the data: the DataModule's state, four batches into epoch 0.
    assert part_way["PretrainDataModule"] == {"epoch": 0, "batches": 4} and "data_position" not in part_way
    with pytest.raises(ValueError, match="save_at_tokens"):
        check_config(tiny_config(tmp_path, cache_dir, "max_tokens=2048", "save_at_tokens=[4096]"))


def test_a_point_past_the_last_steps_tokens_is_refused_before_training(tmp_path, cache_dir):
    """Under a step cap (no token budget) a point past its tokens was never written: the run ended without it, exit 0."""
    with pytest.raises(ArmlmError, match=r"^save_at_tokens=\[100000\]: 100000 input tokens is past this run's end, 2 "
                                         r"steps of 256 input tokens \(512 in all\)"):
        run_pretraining(tiny_config(tmp_path, cache_dir, "max_tokens=null", "trainer.max_steps=2",
                                    "save_at_tokens=[100000]"))
    assert not list(tmp_path.rglob("*.ckpt"))


def test_the_objective_is_built_once_per_run(tmp_path, cache_dir, monkeypatch):
    """train.py builds the objective to check the config before any data is read; the module uses that one."""
    built = []
    real_init = MaskedLM.__init__

    def counting_init(self, *args, **kwargs):
        built.append(self)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(MaskedLM, "__init__", counting_init)
    run_pretraining(tiny_config(tmp_path, cache_dir, "objective=mlm", "trainer.max_steps=2"))
    assert len(built) == 1


def test_token_budget_stops_ar_and_mlm_at_equal_tokens(tmp_path, cache_dir):
    seen = {}
    for objective in ("ar", "mlm"):
        cfg = tiny_config(tmp_path / objective, cache_dir, f"objective={objective}", "max_tokens=1500",
                          "trainer.max_steps=1000")
        seen[objective] = run_pretraining(cfg)
    assert seen["ar"]["tokens_seen"] == seen["mlm"]["tokens_seen"] == 6 * 256  # ceil(1500 / 256) steps
    assert seen["ar"]["steps"] == seen["mlm"]["steps"] == 6


def test_a_flops_budget_stops_each_objective_at_its_first_step_past_it(tmp_path, cache_dir):
    """AR spends the same FLOPs every step; masked diffusion's vary with its mask rates. Each stops at the first
    step that reaches the budget, and its learning-rate schedule spans the steps that took (ends near its floor)."""
    budget = 1.0e10
    for objective in ("ar", "masked_diffusion"):
        # bf16 where the CPU has it: a kernel of its own (models.attention), which the estimate must count too
        summary = run_pretraining(tiny_config(tmp_path / objective, cache_dir, f"objective={objective}",
                                        f"max_flops={budget}", "trainer.max_steps=-1", "optim.warmup_steps=2",
                                        "trainer.precision=bf16-mixed"))
        per_step = summary["flops_seen"] / summary["steps"]
        assert budget <= summary["flops_seen"] < budget + 1.5 * per_step, objective
        if objective == "ar":  # the same FLOPs every step: the estimate is exact, taken under training's precision
            assert summary["flops_per_step_estimate"] == pytest.approx(per_step, rel=1e-9)
        events = EventAccumulator(str(tmp_path / objective / "tensorboard"))
        events.Reload()
        lr, floor = events.Scalars("train/lr")[-1].value, 0.1 * 5e-4  # optim.min_lr_ratio x optim.lr
        assert floor * (1 - 1e-6) <= lr < floor + 0.1 * (5e-4 - floor), objective  # logged in float32
        assert events.Scalars("train/flops_seen")[-1].value == pytest.approx(summary["flops_seen"], rel=1e-6)


def test_a_flops_budget_resumes_to_the_same_stop_and_weights(tmp_path, cache_dir):
    budget = ["objective=masked_diffusion", "max_flops=6e9", "trainer.max_steps=-1", "save_at_tokens=[4096]"]
    whole = run_pretraining(tiny_config(tmp_path / "whole", cache_dir, *budget))
    part_way = tmp_path / "whole" / "checkpoints" / "tokens-4096.ckpt"
    resumed = run_pretraining(tiny_config(tmp_path / "resumed", cache_dir, *budget, f"ckpt_path={part_way}"))
    assert resumed["steps"] == whole["steps"] and resumed["flops_seen"] == whole["flops_seen"] >= 6e9
    a = torch.load(whole["last_checkpoint"], weights_only=True)["state_dict"]
    b = torch.load(resumed["last_checkpoint"], weights_only=True)["state_dict"]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_budget_stops_at_the_end_of_an_accumulation_window(tmp_path, cache_dir):
    """768 tokens is three micro-batches of 256; with two per optimiser step the run ends after the fourth,
    never between a window's micro-batches (whose work would be counted but not applied)."""
    summary = run_pretraining(tiny_config(tmp_path, cache_dir, "objective=ar", "max_tokens=768", "trainer.max_steps=-1",
                                    "trainer.accumulate_grad_batches=2"))
    assert summary["steps"] == 2 and summary["tokens_seen"] == 4 * 256


def test_data_epochs_is_a_budget_in_passes_over_a_slice(tmp_path, cache_dir):
    summary = run_pretraining(tiny_config(tmp_path, cache_dir, "objective=ar", "data.max_train_tokens=2000",
                                    "data_epochs=3", "trainer.max_steps=-1"))
    # 2,000 tokens: 64 blocks of [CLS] + 31, 8 full batches of 8 per pass
    assert summary["train_tokens"] == 2000 and summary["max_train_tokens"] == 2000
    assert summary["tokens_seen"] == 3 * 8 * 8 * 32 and summary["epochs"] == 3 and summary["steps"] == 24
    assert 0 < summary["train_words"] < 2000 and summary["words_seen"] == pytest.approx(3 * summary["train_words"])


def test_a_fraction_of_a_pass_over_the_whole_split_is_a_budget_in_words(tmp_path, cache_dir):
    """The curves' budgets: data_epochs=0.5 of the whole train split sees half its passes' positions, and half its
    whitespace words."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    words = "the river city was at war with the island king and his team".split()
    for d in range(12):
        (corpus / f"{d}.txt").write_text(" ".join(words[(d + i) % len(words)] for i in range(400)))
    summary = run_pretraining(tiny_config(tmp_path / "run", cache_dir, "objective=ar", "data=text",
                                          f"data.corpus.paths=[{corpus}]", "data.corpus.val_fraction=0.2",
                                          "max_tokens=null", "data_epochs=0.5", "trainer.max_steps=-1"))
    assert summary["max_train_tokens"] is None and summary["epochs"] == pytest.approx(0.5, abs=0.02)
    assert summary["words_seen"] == pytest.approx(summary["epochs"] * summary["train_words"])


def test_trainer_max_steps_still_stops_a_budgeted_run_first(tmp_path, cache_dir):
    summary = run_pretraining(tiny_config(tmp_path, cache_dir, "objective=ar", "max_tokens=1000000",
                                    "trainer.max_steps=3"))
    assert summary["steps"] == 3 and summary["tokens_seen"] == 3 * 256


def test_checkpoint_loads_with_weights_only_and_rebuilds_the_model(tmp_path, cache_dir):
    summary = run_pretraining(tiny_config(tmp_path, cache_dir, "objective=mlm_nsp"))
    checkpoint = torch.load(summary["last_checkpoint"], weights_only=True, map_location="cpu")
    hparams = checkpoint["hyper_parameters"]
    assert type(hparams) is dict and all(type(v) in (dict, list, int, bool, str, type(None)) for v in hparams.values())
    assert hparams["objective"]["_target_"] == "armlm.objectives.mlm_nsp.MaskedLMWithNSP"
    assert "[MASK]" in checkpoint["tokenizer_json"]
    module = PretrainModule(**hparams)
    module.load_state_dict(checkpoint["state_dict"])  # strict: every tensor has a home
    ids = torch.randint(6, module.model.config.vocab_size, (2, 16))
    module.eval()
    expected = module.model.logits(module.model(ids, attention=BIDIRECTIONAL))
    reloaded = PretrainModule.load_from_checkpoint(summary["last_checkpoint"], map_location="cpu", weights_only=True)
    reloaded.eval()
    torch.testing.assert_close(reloaded.model.logits(reloaded.model(ids, attention=BIDIRECTIONAL)), expected)


def test_resume_continues_from_the_saved_step(tmp_path, cache_dir):
    first = run_pretraining(tiny_config(tmp_path / "a", cache_dir, "objective=ar"))
    resumed = run_pretraining(tiny_config(tmp_path / "b", cache_dir, "objective=ar", "trainer.max_steps=12",
                                    f"ckpt_path={first['last_checkpoint']}"))
    assert resumed["steps"] == 12
    assert resumed["tokens_seen"] == 12 * 8 * 32  # the token count was restored, not restarted


@pytest.mark.slow
@pytest.mark.parametrize("objective", ["ar", "mlm"])
def test_inductor_compiled_step_gives_the_eager_loss_and_gradients(objective):
    """trainer.step.compile=true with the real compiler (inductor): the speed changes, not the numbers (fp32, CPU).
    Inductor draws its own random numbers unless told to fall back to eager's, which makes the draws comparable."""
    objective_cfg = {"ar": {"_target_": "armlm.objectives.ar.AutoregressiveLM"},
                     "mlm": {"_target_": "armlm.objectives.mlm.MaskedLM"}}[objective]
    settings = dict(model={"vocab_size": 64, "max_len": 32, "d_model": 32, "n_layers": 2, "n_heads": 2, "d_ff": 64,
                           "dropout": 0.0},
                    objective=objective_cfg, optim={}, seed=3)
    vocab = Vocabulary(size=64, pad_id=0, unk_id=1, cls_id=2, sep_id=3, mask_id=4, eod_id=5,
                       unigram_counts=np.ones(64, dtype=np.int64))
    losses, grads = [], []
    for compile_step in (None, {"mode": "default", "backend": "inductor"}):
        torch.manual_seed(0)
        module = PretrainModule(**settings, compile_step=compile_step)
        module.objective.set_vocabulary(vocab)
        assert all("_orig_mod" not in key for key in module.state_dict())  # checkpoints keep plain names
        batch = {"input_ids": torch.randint(6, 64, (4, 24), generator=torch.Generator().manual_seed(1))}
        torch.manual_seed(2)
        with torch._inductor.config.patch(fallback_random=True):
            loss = (module.compiled_loss(batch) if compile_step else module.objective.loss(batch, module.model)).loss
        loss.backward()
        losses.append(loss.detach())
        grads.append([p.grad.clone() for p in module.model.parameters()])
    torch.testing.assert_close(losses[1], losses[0], rtol=1e-5, atol=1e-6)
    # two gradients that are zero, or NaN, on both sides would compare equal: every one is finite and non-zero
    assert all(bool(g.abs().sum() > 0) and bool(torch.isfinite(g).all()) for g in grads[0])
    for compiled, eager in zip(grads[1], grads[0]):
        torch.testing.assert_close(compiled, eager, rtol=1e-4, atol=1e-6)
