"""Checkpoints with random weights, written in milliseconds: one as `armlm train` writes it for any objective
(pretraining_checkpoint, its norms and biases perturbed as training would leave them), and a bare backbone's
(save_checkpoint)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import torch

from armlm.models.backbone import ModelConfig, Transformer
from tests.helpers.configs import tiny_config
from tests.helpers.runs import BuiltOnFirstUse
from tests.helpers.vocabularies import word_tokenizer_json


def perturbed(model: torch.nn.Module, seed: int) -> None:
    """Give the norms and the LM-head bias values training would, so nothing is exported by luck of an init."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and name.endswith("weight"):
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=g))
            elif "norm" in name or name == "lm_bias" or name.startswith("type_embedding"):
                p.copy_(0.3 * torch.randn(p.shape, generator=g) + 0.05)


def pretraining_checkpoint(folder: Path, tokenizer_json: str, objective: str, *overrides: str) -> Path:
    """A checkpoint as `armlm train` writes it (hyperparameters, the module's state dict, the tokenizer), random
    weights, in milliseconds: what reads a checkpoint (export, scoring) does not care whether it was trained."""
    from omegaconf import OmegaConf
    from tokenizers import Tokenizer

    from armlm.training.lit_module import PretrainModule

    cfg = tiny_config(folder, folder, f"objective={objective}", *overrides)
    vocab_size = Tokenizer.from_str(tokenizer_json).get_vocab_size()
    model = {**OmegaConf.to_container(cfg.model, resolve=True), "vocab_size": vocab_size}
    model = {k: v for k, v in model.items() if k in ModelConfig.__dataclass_fields__}
    module = PretrainModule(model=model, objective=OmegaConf.to_container(cfg.objective, resolve=True),
                            optim=OmegaConf.to_container(cfg.optim, resolve=True), seed=0)
    perturbed(module.model, seed=len(objective))
    path = folder / "checkpoints" / "last.ckpt"
    path.parent.mkdir(parents=True)
    torch.save({"hyper_parameters": dict(module.hparams), "state_dict": module.state_dict(),
                "tokenizer_json": tokenizer_json, "trained_length": 32, "armlm_commit": "abc123"}, path)
    return path


class UntrainedRuns(BuiltOnFirstUse):
    """A run folder per objective config (name -> folder) holding an untrained checkpoint (pretraining_checkpoint),
    each written on first use: a test that reads one objective's pays for that one, not for all of them."""

    def __init__(self, root: Path, tokenizer_json: str, names: list[str]) -> None:
        super().__init__(names)
        self.root, self.tokenizer_json = root, tokenizer_json

    def build(self, name: str) -> Path:
        pretraining_checkpoint(self.root / name, self.tokenizer_json, name)
        return self.root / name


CONFIG = ModelConfig(vocab_size=10, max_len=16, d_model=8, n_layers=2, n_heads=2, d_ff=16)
OBJECTIVES = {"ar": {"_target_": "armlm.objectives.ar.AutoregressiveLM"},
              "mlm": {"_target_": "armlm.objectives.mlm.MaskedLM", "mask_rate": 0.15},
              "plm": {"_target_": "armlm.objectives.plm.PermutationLM", "partial_k": 6}}


def save_checkpoint(path, objective="ar", config=CONFIG, **changes):
    weights = {f"model.{k}": v for k, v in Transformer(config).state_dict().items()}
    ckpt = {"hyper_parameters": {"model": asdict(config), "objective": OBJECTIVES[objective], "optim": {}},
            "state_dict": weights, "tokenizer_json": word_tokenizer_json(["a", "b", "c", "d"])}
    ckpt.update(changes)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(ckpt, path)
    return path
