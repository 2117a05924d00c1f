"""Cooldown branches: one long run serves every shorter budget of the same seed.

With `optim.decay_fraction=f` the learning rate holds at its peak after warmup and decays linearly over the last f of
a run's steps (warmup-stable-decay: Hägele et al. 2024, "Scaling Laws and Compute-Optimal Training Beyond Fixed
Training Durations"). Two such runs of one seed, data order and settings then train identically until the shorter
one's decay starts. So the longer run (the trunk, `branch_budgets=[...]`) saves a checkpoint at each shorter
budget's decay start, and a run of that budget (`branch_from=<the trunk's run folder>`) resumes there and decays:
the weights of that run trained from scratch (tests/test_branches.py), for f of its steps. Resuming is exact because
the data order and every corruption draw are seeded by step, not by process (datamodules.sampler,
PretrainModule.corruption_generator).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from models.checkpoint import read_hyperparameters
from training.budget import steps_for_tokens
from training.callbacks import SaveAtTokens
from training.optim import decay_start
from training.setup import differences

# data settings that change neither the tokens nor their order (datamodules/shards.py, the loaders' workers)
ORDER_FREE_DATA_KEYS = ("cache_dir", "num_workers", "encode_workers", "shard_chars")


def budget_steps(cfg: DictConfig, budget: float, epoch_positions: int, tokens_per_step: int) -> int:
    """The optimiser steps of a budget given in the run's own unit: passes over the data (data_epochs) or input
    tokens (max_tokens), as training.run.set_budget_steps counts them."""
    tokens = round(float(budget) * epoch_positions) if cfg.get("data_epochs") else int(budget)
    return steps_for_tokens(tokens, tokens_per_step)


def check_branch_settings(cfg: DictConfig) -> None:
    """Branches need a stable phase and a budget whose steps are known before the run (not a FLOPs estimate)."""
    budgets, trunk = list(cfg.get("branch_budgets") or []), cfg.get("branch_from")
    if not budgets and not trunk:
        return
    which = "branch_budgets" if budgets else "branch_from"
    if cfg.optim.get("decay_fraction") is None:
        raise ValueError(f"{which} needs a stable learning rate before the decay: add optim.decay_fraction=0.2 "
                         "(the trunk and its branches alike)")
    if not (cfg.get("max_tokens") or cfg.get("data_epochs")):
        raise ValueError(f"{which} needs a budget of input tokens or passes (max_tokens= or data_epochs=), whose "
                         "steps are known before the run; a FLOPs budget's are an estimate")
    if budgets and trunk:
        raise ValueError("a run is a trunk (branch_budgets) or a branch (branch_from), not both")
    if trunk and cfg.get("init_from"):
        raise ValueError("branch_from resumes the trunk's whole training state; drop init_from (a fresh optimiser)")
    own = float(cfg.get("data_epochs") or cfg.get("max_tokens"))
    if any(isinstance(b, bool) or not isinstance(b, (int, float)) or not 0 < b < own for b in budgets):
        raise ValueError(f"branch_budgets={budgets}: give budgets between 0 and this run's own ({own:g}), in its unit "
                         f"({'passes' if cfg.get('data_epochs') else 'input tokens'})")


def trunk_points(cfg: DictConfig, epoch_positions: int, tokens_per_step: int) -> list[int]:
    """The input tokens at which a trunk saves a checkpoint for each of its `branch_budgets`: where that budget's
    decay starts. A shorter budget's decay never starts after the trunk's own (steps - round(f x steps) does not
    fall as steps grow), so the trunk is still at its peak rate there, as the branch's run from scratch would be."""
    warmup, fraction = int(cfg.optim.warmup_steps), cfg.optim.decay_fraction
    return [decay_start(budget_steps(cfg, budget, epoch_positions, tokens_per_step), warmup, fraction) * tokens_per_step
            for budget in cfg.get("branch_budgets") or []]


def branch_checkpoint(cfg: DictConfig, own_steps: int, tokens_per_step: int) -> tuple[Path, int]:
    """The trunk's checkpoint this branch resumes from (its own decay start) and the input tokens trained there,
    after checking that the trunk ran with this run's seed, optimiser and data (training.run checks the model and
    objective, as for any resume); raises naming what differs or is missing."""
    trunk = Path(cfg.branch_from)
    start = decay_start(own_steps, int(cfg.optim.warmup_steps), cfg.optim.decay_fraction)
    checkpoint = SaveAtTokens.path(trunk / "checkpoints", start * tokens_per_step)
    if not checkpoint.is_file():
        saved = sorted(p.name for p in (trunk / "checkpoints").glob("tokens-*.ckpt"))
        raise FileNotFoundError(
            f"branch_from={trunk}: no checkpoint at this run's decay start (step {start}, {checkpoint.name}); it has "
            f"{saved or 'none'}. Run the trunk with this budget in branch_budgets, or drop branch_from")
    saved = read_hyperparameters(checkpoint)
    ours = {"seed": int(cfg.seed), "optim": OmegaConf.to_container(cfg.optim, resolve=True)}
    theirs = {key: saved.get(key) for key in ours}
    trunk_config = trunk / ".hydra" / "config.yaml"
    if trunk_config.is_file():  # the data order: corpus, tokenizer, blocks and batches
        ours["data"], theirs["data"] = (
            {k: v for k, v in OmegaConf.to_container(data, resolve=True).items() if k not in ORDER_FREE_DATA_KEYS}
            for data in (cfg.data, OmegaConf.load(trunk_config).data))
    differing = differences(ours, theirs)
    if differing:
        raise ValueError(f"branch_from={trunk} trained otherwise ({', '.join(differing)}); a branch needs the trunk's "
                         "seed, optimiser and data")
    return checkpoint, start * tokens_per_step


def branch_record(cfg: DictConfig, checkpoint: Path, tokens: int) -> dict[str, Any]:
    """What summary.json keeps of a branch: the trunk, the checkpoint it resumed from and the input tokens the trunk
    had trained there (the share of the trunk's cost this run's budget used)."""
    return {"trunk": str(Path(cfg.branch_from)), "checkpoint": str(checkpoint), "tokens": int(tokens)}
