"""The one reader of armlm checkpoint files (pretraining and fine-tuning alike).

Checkpoints are read with `weights_only=True`: armlm stores plain dicts and tensors, and nothing else is
trusted.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from armlm.common.errors import ArmlmError, ArmlmFileError
from armlm.common.migrations import migrate_code_references
from armlm.models.backbone import Transformer

BACKBONE_PREFIX = "model."  # the pretraining LightningModule keeps the backbone under `model`


def resolve_checkpoint(path: str | Path) -> Path:
    """A checkpoint file, or a pretraining run folder (its `checkpoints/last.ckpt`: the end of the token
    budget, which is where AR and MLM runs are comparable)."""
    path = Path(path)
    if path.is_dir():
        last = path / "checkpoints" / "last.ckpt"
        if not last.is_file():
            raise ArmlmFileError(f"{path} is a folder without checkpoints/last.ckpt; give a "
                                    "pretraining run folder or a checkpoint file")
        return last
    if not path.is_file():
        raise ArmlmFileError(f"{path} does not exist; give a pretraining checkpoint file or a run folder "
                                "(outputs/<objective>/<time>)")
    return path


def read_checkpoint(path: Path) -> dict[str, Any]:
    """The checkpoint's dict, read with weights_only=True (memory-mapped: a resume check reads only the
    hyperparameters); anything else armlm did not write is refused. The code its hyperparameters name is named as
    today (common.migrations.migrate_code_references: checkpoints written before the `armlm` namespace)."""
    if not zipfile.is_zipfile(path):  # torch.save writes a zip archive; torch's own error here is about mmap
        raise ArmlmError(f"{path} is not a checkpoint file (not the zip archive torch.save writes: cut short, "
                         "another kind of file, or torch's legacy format, which a current torch can re-save); use a "
                         "checkpoint that armlm wrote")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as err:  # unpickling refused (a pickled object inside) or not a torch file at all
        raise ArmlmError(f"{path} cannot be loaded safely with weights_only=True ({err}); use a checkpoint "
                         "that armlm wrote") from err
    if not isinstance(ckpt, dict):
        raise ArmlmError(f"{path} holds a {type(ckpt).__name__}, not an armlm checkpoint")
    if isinstance(ckpt.get("hyper_parameters"), dict):
        ckpt["hyper_parameters"] = migrate_code_references(ckpt["hyper_parameters"])
    return ckpt


def hyperparameters(ckpt: dict[str, Any]) -> Any:
    """A read checkpoint's hyperparameters (plain dicts: model, objective or task, optimiser, ...), or None."""
    return ckpt.get("hyper_parameters")


def read_hyperparameters(path: Path) -> Any:
    """The hyperparameters of a checkpoint to resume from (pretraining or fine-tuning)."""
    if not path.is_file():
        raise ArmlmFileError(f"ckpt_path={path} does not exist; give the interrupted run's "
                                "checkpoints/last.ckpt")
    return hyperparameters(read_checkpoint(path))


def backbone_weights(ckpt: dict[str, Any]) -> dict[str, Tensor]:
    return {k[len(BACKBONE_PREFIX):]: v for k, v in ckpt["state_dict"].items() if k.startswith(BACKBONE_PREFIX)}


def load_weights(backbone: Transformer, weights: dict[str, Tensor], origin: Path | str) -> None:
    """Load a checkpoint's backbone weights; any key that is missing, extra or of another shape is named,
    with the config settings that usually explain it."""
    expected = backbone.state_dict()
    missing = sorted(set(expected) - set(weights))
    extra = sorted(set(weights) - set(expected))
    reshaped = sorted(f"{k} {tuple(weights[k].shape)} vs {tuple(v.shape)}" for k, v in expected.items()
                      if k in weights and weights[k].shape != v.shape)
    if missing or extra or reshaped:
        raise ArmlmError(
            f"{origin} does not fit model config {backbone.config.to_dict()}: missing {missing}, unexpected "
            f"{extra}, shape (checkpoint vs model) {reshaped}. Its stored config and weights disagree "
            "(model.positions, model.n_layers, model.d_model and the vocabulary size decide these); use the "
            "config it was saved with"
        )
    backbone.load_state_dict(weights)
