"""Model sources: an armlm run or checkpoint, a Hugging Face folder or `hf:<id>[@revision]`, opened as one
`ModelSource` that every instrument asks how to read (sources.base)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from armlm.common.errors import ArmlmError
from armlm.models.backbone import ModelConfig, Transformer
from armlm.sources.armlm import open_armlm
from armlm.sources.base import SOURCE_KEY, ModelSource, Reading, SpecialTokens
from armlm.sources.huggingface import HUB_PREFIX, is_huggingface_folder, open_huggingface

__all__ = ["SOURCE_KEY", "ModelSource", "Reading", "SpecialTokens", "backbone_for", "open_source"]


def open_source(spec: str | Path, device: str | torch.device = "cpu", *, trust_remote_code: bool = False) -> ModelSource:
    """`spec`: an armlm checkpoint file or run folder (its checkpoints/last.ckpt), a Hugging Face model folder (its
    config.json), or hf:<hub id>[@revision]. `trust_remote_code`: run a folder's own modelling file (some hub
    models ship one; armlm's own remote-code exports are refused at load: sources.hf_backbone.probe_head)."""
    text = str(spec)
    if text.startswith(HUB_PREFIX):
        return open_huggingface(text, device, trust_remote_code=trust_remote_code)
    path = Path(text)
    if path.is_dir() and not (path / "checkpoints" / "last.ckpt").is_file():
        if is_huggingface_folder(path):
            return open_huggingface(text, device, trust_remote_code=trust_remote_code)
        raise ArmlmError(f"{path} is neither an armlm run (no checkpoints/last.ckpt) nor a Hugging Face model (no "
                         "config.json); give a run folder, a checkpoint file, a Hugging Face folder or hf:<hub id>")
    return open_armlm(path, device)


def backbone_for(model: dict[str, Any]) -> nn.Module:
    """The backbone a fine-tuning checkpoint's `model` hyperparameters describe: armlm's Transformer from its config
    fields (weights loaded by the caller), or a transformers model reopened from `source` (its own weights, which a
    fine-tuned checkpoint's state dict then replaces)."""
    if SOURCE_KEY in model:
        return open_source(model[SOURCE_KEY], trust_remote_code=bool(model.get("trust_remote_code", False))).backbone
    return Transformer(ModelConfig(**model))
