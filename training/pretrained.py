"""What fine-tuning and diagnostics need from a pretraining checkpoint: model config, backbone weights,
tokenizer and the objective (which says how its backbone attends)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import torch
from hydra.utils import get_class
from torch import Tensor

from armlm.common.errors import ArmlmError
from armlm.common.migrations import migrate_pretraining_checkpoint
from armlm.models.backbone import ModelConfig, Transformer
from armlm.models.checkpoint import backbone_weights, hyperparameters, load_weights, read_checkpoint, resolve_checkpoint
from armlm.objectives.base import Objective


@dataclass
class Pretrained:
    path: Path
    model: dict[str, Any]  # ModelConfig fields
    objective: dict[str, Any]  # the objective's config, with its _target_
    objective_class: type[Objective]  # asked how the backbone attends downstream and how it is scored
    tokenizer_json: str
    weights: dict[str, Tensor]  # backbone state dict
    # The longest input pretraining fed (its block size): positions beyond it were never trained. None for
    # checkpoints written before armlm recorded it (common.migrations.migrate_pretraining_checkpoint).
    trained_length: int | None = None

    @property
    def objective_name(self) -> str:
        return self.objective_class.__name__

    def backbone(self, device: str | torch.device = "cpu") -> Transformer:
        """The checkpoint's backbone with its weights, in eval mode on `device` (a mismatch between the stored
        config and the weights is named, models.checkpoint.load_weights)."""
        model = Transformer(ModelConfig(**self.model))
        load_weights(model, self.weights, self.path)
        return model.to(device).eval()

    def summary(self) -> dict[str, Any]:
        return {"checkpoint": str(self.path), "objective": self.objective_name,
                "finetune_attention": self.objective_class.finetune_attention, "model": self.model,
                "trained_length": self.trained_length}


def load_pretrained(path: str | Path) -> Pretrained:
    ckpt_path = resolve_checkpoint(path)
    ckpt = migrate_pretraining_checkpoint(read_checkpoint(ckpt_path))
    hparams = hyperparameters(ckpt)
    if not isinstance(hparams, dict) or "task" in hparams:
        raise ArmlmError(f"{ckpt_path} is not an armlm pretraining checkpoint (a fine-tuned one, or another "
                         "program's); give the checkpoint of a `python train.py objective=...` run")
    missing = [k for k in ("model", "objective") if k not in hparams] + (
        [] if ckpt.get("tokenizer_json") else ["tokenizer_json"])
    if missing:
        raise ArmlmError(f"{ckpt_path} lacks {missing}; it was not written by armlm pretraining")
    unknown = sorted(set(hparams["model"]) - {f.name for f in fields(ModelConfig)})
    if unknown:
        raise ArmlmError(f"{ckpt_path}: model config keys {unknown} are unknown to this version of armlm; "
                         "fine-tune with the armlm version that wrote the checkpoint")
    objective = objective_class(hparams["objective"], ckpt_path)
    return Pretrained(ckpt_path, dict(hparams["model"]), dict(hparams["objective"]), objective,
                      ckpt["tokenizer_json"], backbone_weights(ckpt), ckpt["trained_length"])


def objective_class(config: dict[str, Any], origin: Path) -> type[Objective]:
    """The class whose attributes say how a checkpoint's backbone attends and is scored: the class its objective
    config names, or, for an objective made of others, the one it answers as. Nothing is built (no NSP head)."""
    try:
        cls = get_class(str(config.get("_target_")))
    except Exception as err:  # a class renamed or removed since the checkpoint was written
        raise ArmlmError(f"{origin}: objective {config.get('_target_')!r} cannot be imported ({err}); use the "
                         "armlm version that wrote the checkpoint") from err
    if not (isinstance(cls, type) and issubclass(cls, Objective)):
        raise ArmlmError(f"{origin}: objective {config.get('_target_')!r} is not an armlm objective")
    return cls.downstream(config)  # an objective of phases answers as its last phase (Objective.downstream)
