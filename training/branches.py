"""Cooldown branches: one long run serves every shorter budget of the same seed.

With `optim.decay_fraction=f` the learning rate holds at its peak after warmup and decays linearly over the last f of
a run's steps (warmup-stable-decay: Hägele et al. 2024, "Scaling Laws and Compute-Optimal Training Beyond Fixed
Training Durations"). Two such runs of one seed, data order and settings then train identically until the shorter
one's decay starts. So the longer run (the trunk, `branch_budgets=[...]`) saves a checkpoint at each shorter
budget's decay start, and a run of that budget (`branch_from=<the trunk's run folder>`) resumes there and decays:
the weights of that run trained from scratch (tests/test_branches.py), for f of its steps. Resuming is exact because
the data order and every corruption draw are seeded by step, not by process (datamodules.sampler,
PretrainModule.corruption_generator). An objective whose own schedule follows the budget (`needs_progress`: a mask
rate that moves, phases) cannot branch: the trunk's schedule is not the branch's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from armlm.common.errors import ArmlmError, ArmlmFileError
from armlm.models.checkpoint import hyperparameters, read_checkpoint
from armlm.training.budget import steps_for_tokens, tokens_of_passes
from armlm.training.callbacks import SaveAtSteps, TokenAccounting
from armlm.training.optim import decay_start
from armlm.training.setup import differences

# data settings that change neither the tokens nor their order (datamodules/shards.py, the loaders' workers)
ORDER_FREE_DATA_KEYS = ("cache_dir", "num_workers", "encode_workers", "shard_chars", "val_batch_size")
# trainer settings that change what a step is or does
STEP_TRAINER_KEYS = ("accumulate_grad_batches", "gradient_clip_val", "precision", "devices", "num_nodes")


def budget_steps(cfg: DictConfig, budget: float, epoch_positions: int, tokens_per_step: int) -> int:
    """The optimiser steps of a budget given in the run's own unit: passes over the data (data_epochs) or input
    tokens (max_tokens), as training.run.set_budget_steps counts them."""
    tokens = tokens_of_passes(budget, epoch_positions) if cfg.get("data_epochs") else int(budget)
    return steps_for_tokens(tokens, tokens_per_step)


def branch_start(cfg: DictConfig, steps: int) -> int:
    """The decay start of a run of `steps` steps, refused where there is nothing before it to share or nothing after
    it to decay."""
    start = decay_start(steps, int(cfg.optim.warmup_steps), cfg.optim.decay_fraction)
    if not 1 <= start < steps:
        raise ArmlmError(f"a run of {steps} steps with optim.warmup_steps={cfg.optim.warmup_steps} and "
                         f"optim.decay_fraction={cfg.optim.decay_fraction} starts its decay at step {start}, so it has "
                         "no stable phase to share and decay after; give a longer budget or a shorter warmup")
    return start


def trunk_points(cfg: DictConfig, epoch_positions: int, tokens_per_step: int) -> list[int]:
    """The steps at which a trunk saves a checkpoint for each of its `branch_budgets`: where that budget's decay
    starts. A shorter budget's decay never starts after the trunk's own (steps - round(f x steps) does not fall as
    steps grow), so the trunk is still at its peak rate there, as the branch's run from scratch would be."""
    return [branch_start(cfg, budget_steps(cfg, budget, epoch_positions, tokens_per_step))
            for budget in cfg.get("branch_budgets") or []]


def branch_checkpoint(cfg: DictConfig, own_steps: int) -> tuple[Path, int]:
    """The trunk's checkpoint this branch resumes from (its own decay start) and the input tokens trained there,
    after checking that the checkpoint is at that step, at the peak rate, and that the trunk ran with this run's seed,
    optimiser, data and step settings (training.run checks the model and objective, as for any resume); raises
    naming what differs or is missing."""
    trunk = Path(cfg.branch_from)
    start = branch_start(cfg, own_steps)
    checkpoint = SaveAtSteps.path(trunk / "checkpoints", start)
    if not checkpoint.is_file():
        saved = sorted(p.name for p in (trunk / "checkpoints").glob("step-*.ckpt"))
        raise ArmlmFileError(
            f"branch_from={trunk}: no checkpoint at this run's decay start ({checkpoint.name}); it has {saved or 'none'}. "
            "Run the trunk with this budget in branch_budgets, or drop branch_from")
    ckpt = read_checkpoint(checkpoint)
    schedule = (ckpt.get("lr_schedulers") or [{}])[0]
    if ckpt.get("global_step") != start or schedule.get("last_epoch") != start:
        raise ArmlmError(f"{checkpoint} holds step {ckpt.get('global_step')} (its schedule at "
                         f"{schedule.get('last_epoch')}), not this run's decay start {start}; the trunk counted its "
                         "steps otherwise: rerun it with this run's settings")
    saved = hyperparameters(ckpt)
    ours = {"seed": int(cfg.seed), "optim": OmegaConf.to_container(cfg.optim, resolve=True)}
    theirs = {key: saved.get(key) for key in ours}
    trunk_config = trunk / ".hydra" / "config.yaml"
    if trunk_config.is_file():  # the data order (corpus, tokenizer, blocks, batches) and what a step is
        trunk_cfg = OmegaConf.load(trunk_config)
        ours["data"], theirs["data"] = (
            {k: v for k, v in OmegaConf.to_container(data, resolve=True).items() if k not in ORDER_FREE_DATA_KEYS}
            for data in (cfg.data, trunk_cfg.data))
        ours["trainer"], theirs["trainer"] = ({k: t.get(k) for k in STEP_TRAINER_KEYS} for t in (cfg.trainer, trunk_cfg.trainer))
    differing = differences(ours, theirs)
    if differing:
        raise ArmlmError(f"branch_from={trunk} trained otherwise ({', '.join(differing)}); a branch needs the trunk's "
                         "seed, optimiser, data and step settings")
    return checkpoint, TokenAccounting.saved_tokens(ckpt) or 0


def branch_record(cfg: DictConfig, checkpoint: Path, tokens: int) -> dict[str, Any]:
    """What summary.json keeps of a branch: the trunk, the checkpoint it resumed from and the input tokens the trunk
    had trained there (the share of the trunk's cost this run's budget used)."""
    return {"trunk": str(Path(cfg.branch_from)), "checkpoint": str(checkpoint), "tokens": int(tokens)}
