"""`armlm finetune task=<name> pretrained=<checkpoint or run folder>` (or vectors=<embeddings run folder>), also
reached as `python train.py task=...`."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from armlm.finetune.run import run_finetune
from armlm.finetune.static import run_static_finetune
from armlm.training.disk_full import reporting_full_disk
from armlm.training.run_folder import refuse_writing_over_a_run, resolve_last_checkpoint
from armlm.training.setup import command_line_overrides
from armlm.training.trainer import quiet_lightning


def finetune(cfg: DictConfig) -> dict[str, Any]:
    """A checkpoint (pretrained=) or static word vectors (vectors=) on the task, with a full disk reported as what
    to free and how to resume."""
    quiet_lightning()
    resolve_last_checkpoint(cfg)
    refuse_writing_over_a_run(cfg, "results.json")
    run = run_static_finetune if cfg.get("vectors") else run_finetune
    return reporting_full_disk(run, cfg, command_line_overrides())
