"""Load what fine-tuning needs from a pretraining checkpoint: model config, weights, tokenizer, objective.

Checkpoints are read with `weights_only=True`: armlm stores plain dicts and tensors, and nothing else
is trusted.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import torch
from hydra.utils import instantiate
from torch import Tensor

from models.backbone import ModelConfig, Transformer

BACKBONE_PREFIX = "model."  # PretrainModule keeps the backbone under `model`


@dataclass
class Pretrained:
    path: Path
    model: dict[str, Any]  # ModelConfig fields
    objective: dict[str, Any]  # the objective's config, with its _target_
    objective_name: str
    causal: bool  # the attention mode the backbone was pretrained with
    tokenizer_json: str
    weights: dict[str, Tensor]  # backbone state dict
    # The longest input pretraining fed (its block size): positions beyond it were never trained. None for
    # checkpoints written before armlm recorded it.
    trained_length: int | None = None

    def summary(self) -> dict[str, Any]:
        return {"checkpoint": str(self.path), "objective": self.objective_name,
                "causal": self.causal, "model": self.model, "trained_length": self.trained_length}


def resolve_checkpoint(path: str | Path) -> Path:
    """A checkpoint file, or a pretraining run folder (its `checkpoints/last.ckpt`: the end of the token
    budget, which is where AR and MLM runs are comparable)."""
    path = Path(path)
    if path.is_dir():
        last = path / "checkpoints" / "last.ckpt"
        if not last.is_file():
            raise FileNotFoundError(f"{path} is a folder without checkpoints/last.ckpt; give a "
                                    "pretraining run folder or a checkpoint file")
        return last
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist; give a pretraining checkpoint file or a run folder "
                                "(outputs/<objective>/<time>)")
    return path


def load_pretrained(path: str | Path) -> Pretrained:
    ckpt_path = resolve_checkpoint(path)
    try:
        ckpt = torch.load(ckpt_path, map_location="cpu", weights_only=True)
    except Exception as err:  # a pickled object inside, or not a torch file at all
        raise ValueError(f"{ckpt_path} cannot be loaded with weights_only=True ({err}); give a checkpoint "
                         "written by armlm pretraining") from err
    hparams = ckpt.get("hyper_parameters") if isinstance(ckpt, dict) else None
    if not isinstance(hparams, dict) or "task" in hparams:
        raise ValueError(f"{ckpt_path} is not an armlm pretraining checkpoint (a fine-tuned one, or another "
                         "program's); give the checkpoint of a `python train.py objective=...` run")
    missing = [k for k in ("model", "objective") if k not in hparams] + (
        [] if ckpt.get("tokenizer_json") else ["tokenizer_json"])
    if missing:
        raise ValueError(f"{ckpt_path} lacks {missing}; it was not written by armlm pretraining")
    unknown = sorted(set(hparams["model"]) - {f.name for f in fields(ModelConfig)})
    if unknown:
        raise ValueError(f"{ckpt_path}: model config keys {unknown} are unknown to this version of armlm; "
                         "fine-tune with the armlm version that wrote the checkpoint")
    objective = instantiate(hparams["objective"])
    weights = {k[len(BACKBONE_PREFIX):]: v for k, v in ckpt["state_dict"].items() if k.startswith(BACKBONE_PREFIX)}
    return Pretrained(ckpt_path, dict(hparams["model"]), dict(hparams["objective"]), type(objective).__name__,
                      bool(objective.causal), ckpt["tokenizer_json"], weights, ckpt.get("trained_length"))


def load_weights(backbone: Transformer, weights: dict[str, Tensor], origin: Path | str) -> None:
    """Load a checkpoint's backbone weights; any key that is missing, extra or of another shape is named,
    with the config settings that usually explain it."""
    expected = backbone.state_dict()
    missing = sorted(set(expected) - set(weights))
    extra = sorted(set(weights) - set(expected))
    reshaped = sorted(f"{k} {tuple(weights[k].shape)} vs {tuple(v.shape)}" for k, v in expected.items()
                      if k in weights and weights[k].shape != v.shape)
    if missing or extra or reshaped:
        raise ValueError(
            f"{origin} does not fit model config {backbone.config.to_dict()}: missing {missing}, unexpected "
            f"{extra}, shape (checkpoint vs model) {reshaped}. Its stored config and weights disagree "
            "(model.positions, model.n_layers, model.d_model and the vocabulary size decide these); use the "
            "config it was saved with"
        )
    backbone.load_state_dict(weights)
