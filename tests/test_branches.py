"""Cooldown branches (training.branches): a branch resumed from its trunk is the run of its budget from scratch."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from armlm.training.optim import decay_start, warmup_then_linear_decay
from armlm.training.run import run_pretraining
from tests.helpers.configs import tiny_config
from tests.helpers.lanes import fast_lane_keeps
from tests.helpers.runs import shared_across_workers

STEP_TOKENS = 8 * 32  # the tiny config's batch x block
WSD = ("optim.decay_fraction=0.25", "optim.warmup_steps=2", "trainer.max_steps=-1", "max_tokens=null")


def test_the_schedule_holds_its_peak_until_the_decay_starts():
    total, warmup, floor = 20, 2, 0.1
    start = decay_start(total, warmup, 0.25)
    assert start == 15
    factors = [warmup_then_linear_decay(s, warmup, total, floor, start) for s in range(total + 1)]
    assert factors[:2] == [0.5, 1.0] and all(f == 1.0 for f in factors[2:start + 1])
    assert factors[start + 1:] == pytest.approx([1 - (1 - floor) * (s - start) / (total - start)
                                                 for s in range(start + 1, total + 1)])
    # decay_fraction null: the schedule every run had before the option existed, written out
    assert decay_start(total, warmup, None) == warmup
    before = [(s + 1) / warmup if s < warmup else 1 - (1 - floor) * min(1.0, (s - warmup) / (total - warmup))
              for s in range(total + 1)]
    assert [warmup_then_linear_decay(s, warmup, total, floor) for s in range(total + 1)] == pytest.approx(before)
    assert decay_start(10, 4, 0.9) == 4  # never inside warmup


def digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and "tensorboard" not in p.parts}


SHORT, LONG = 12 * STEP_TOKENS, 24 * STEP_TOKENS


@pytest.fixture(scope="session")
def trunk(tmp_path_factory, cache_dir) -> Path:
    """A 24-step trunk that saves the 12-step budget's decay start, with its Hydra config as a run folder holds it;
    built once per test run."""
    def build(folder: Path) -> None:
        cfg = tiny_config(folder, cache_dir, *WSD, f"max_tokens={LONG}", f"branch_budgets=[{SHORT}]")
        assert run_pretraining(cfg)["steps"] == 24
        (folder / ".hydra").mkdir()
        OmegaConf.save(cfg, folder / ".hydra" / "config.yaml")
    return shared_across_workers(tmp_path_factory, "branch-trunk", build)


@pytest.mark.slow
def test_a_branch_from_its_trunk_equals_its_budget_run_from_scratch(tmp_path, cache_dir, trunk):
    start = decay_start(12, 2, 0.25)  # step 9: the short run's decay starts there, the trunk's at step 18
    assert sorted(p.name for p in (trunk / "checkpoints").glob("step-*.ckpt")) == [f"step-{start}.ckpt"]
    before = digest(trunk)
    scratch = run_pretraining(tiny_config(tmp_path / "scratch", cache_dir, *WSD, f"max_tokens={SHORT}"))
    branch = run_pretraining(tiny_config(tmp_path / "branch", cache_dir, *WSD, f"max_tokens={SHORT}",
                                         f"branch_from={trunk}"))
    assert branch["steps"] == scratch["steps"] == 12 and branch["tokens_seen"] == scratch["tokens_seen"] == SHORT
    a = torch.load(scratch["last_checkpoint"], weights_only=True)["state_dict"]
    b = torch.load(branch["last_checkpoint"], weights_only=True)["state_dict"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert branch["val_loss"] == scratch["val_loss"]
    assert branch["branch_from"] == {"trunk": str(trunk), "tokens": start * STEP_TOKENS,
                                     "checkpoint": str(trunk / "checkpoints" / f"step-{start}.ckpt")}
    assert scratch["branch_from"] is None and Path(branch["best_checkpoint"]).parent == tmp_path / "branch" / "checkpoints"
    assert digest(trunk) == before  # the branch wrote nothing into its trunk's folder


@pytest.mark.slow
def test_a_branch_refuses_a_trunk_that_trained_otherwise_or_never_saved_its_start(tmp_path, cache_dir, trunk):
    branch = (*WSD, f"branch_from={trunk}", f"max_tokens={SHORT}")
    with pytest.raises(ValueError, match=r"trained otherwise \(seed: checkpoint 1234 vs run 5\)"):
        run_pretraining(tiny_config(tmp_path / "b1", cache_dir, *branch, "seed=5"))
    with pytest.raises(ValueError, match=r"trainer.accumulate_grad_batches: checkpoint 1 vs run 2"):
        # twice the tokens in steps of twice the size: the same 12 steps and decay start (9), another step
        run_pretraining(tiny_config(tmp_path / "b0", cache_dir, *branch, f"max_tokens={LONG}",
                                    "trainer.accumulate_grad_batches=2"))
    with pytest.raises(ValueError, match=r"optim.lr: checkpoint 0.0005 vs run 0.001"):
        run_pretraining(tiny_config(tmp_path / "b2", cache_dir, *branch, "optim.lr=1e-3"))
    with pytest.raises(ValueError, match=r"data.tokenizer.min_frequency: checkpoint 2 vs run 3"):
        run_pretraining(tiny_config(tmp_path / "b3", cache_dir, *branch, "data.tokenizer.min_frequency=3"))
    moved = tmp_path / "moved" / "checkpoints"  # a checkpoint named for another step than the one it holds
    moved.mkdir(parents=True)
    shutil.copy(trunk / "checkpoints" / "step-9.ckpt", moved / "step-12.ckpt")
    with pytest.raises(ValueError, match=r"holds step 9 \(its schedule at 9\), not this run's decay start 12"):
        run_pretraining(tiny_config(tmp_path / "b5", cache_dir, *WSD, f"branch_from={moved.parent}",
                                    f"max_tokens={16 * STEP_TOKENS}"))
    with pytest.raises(FileNotFoundError, match=r"no checkpoint at this run's decay start \(step-12.ckpt\); it has \['step-9"):
        run_pretraining(tiny_config(tmp_path / "b4", cache_dir, *WSD, f"branch_from={trunk}",
                                    f"max_tokens={16 * STEP_TOKENS}"))


@pytest.mark.parametrize("overrides, message", fast_lane_keeps([
    (("branch_from=somewhere", "optim.decay_fraction=null"), r"branch_from needs a stable learning rate"),
    (("branch_budgets=[512]", "optim.decay_fraction=null"), r"branch_budgets needs a stable learning rate"),
    (("branch_from=somewhere", "max_tokens=null", "max_flops=1e10"), r"a FLOPs budget's are an estimate"),
    (("branch_budgets=[512]", "branch_from=somewhere"), r"a trunk \(branch_budgets\) or a branch"),
    (("branch_budgets=[4096]",), r"branch_budgets=\[4096\]: give budgets between 0 and this run's own \(2048\)"),
    (("branch_from=somewhere", "init_from=elsewhere"), r"branch_from with init_from"),
    (("branch_budgets=[512]", "init_from=elsewhere"), r"branch_budgets with init_from"),
    (("branch_from=somewhere", "objective=hybrid"), r"follows its budget .* train each budget from scratch"),
], every=4))
def test_branch_settings_that_cannot_be_honoured_are_refused(tmp_path, cache_dir, overrides, message):
    cfg = tiny_config(tmp_path, cache_dir, *WSD, "max_tokens=2048", *overrides)
    with pytest.raises(ValueError, match=message):
        run_pretraining(cfg)



@pytest.mark.slow
def test_a_budget_with_no_stable_phase_cannot_branch(tmp_path, cache_dir):
    """Warmup as long as the run: its decay would start at its last step, with nothing to share before it."""
    cfg = tiny_config(tmp_path, cache_dir, *WSD, "optim.warmup_steps=8", f"max_tokens={16 * STEP_TOKENS}",
                      f"branch_budgets=[{8 * STEP_TOKENS}]")
    with pytest.raises(ValueError, match=r"a run of 8 steps .* starts its decay at step 8, so it has no stable phase"):
        run_pretraining(cfg)
