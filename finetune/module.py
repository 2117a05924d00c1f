"""Fine-tuning a pretrained backbone: a task head on its states, the task's loss and metrics (TaskModule).

The ablation switches are plain settings: `mode` (full fine-tuning or a frozen backbone with a trained
head), `attention` (causal or bidirectional: how the backbone attends), `pooling` (which state a sequence-level
head sees) and, for feature-based tagging, `features`: `concat` (the top `feature_layers` layers side by side:
BERT's four, or the last alone) or `scalar_mix` (ELMo's learned mix of every layer, the embedding layer
included). Hyperparameters are plain dicts, so checkpoints load with `torch.load(weights_only=True)`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from armlm.common.errors import ArmlmError
from armlm.common.migrations import FINETUNE_FEATURES_BEFORE
from armlm.finetune.artefacts import metric_tag
from armlm.finetune.task_module import TaskModule
from armlm.models.attention import Attention
from armlm.models.heads import POOLINGS, ClassificationHead, ScalarMix, TaggingHead, pool
from armlm.sources import backbone_for

MODES = ("full", "features")
FEATURES = ("concat", "scalar_mix")
__all__ = ["FEATURES", "MODES", "FinetuneModule", "metric_tag"]


class FinetuneModule(TaskModule):
    def __init__(self, model: dict[str, Any], task: dict[str, Any], settings: dict[str, Any],
                 optim: dict[str, Any], pretrained: dict[str, Any] | None = None, seed: int = 0,
                 backbone: nn.Module | None = None) -> None:
        """`settings`: mode, attention, pooling, head_dropout, feature_layers, features. `pretrained` only records
        where the backbone came from. `backbone`: the pretrained one to train, as its source opened it (never saved
        as a hyperparameter); without it (a reload) the backbone is rebuilt from `model` and the checkpoint's state
        dict fills it."""
        super().__init__(task, optim, seed)
        self.save_hyperparameters(ignore=["backbone"])
        self.mode, self.pooling = settings["mode"], settings["pooling"]
        self.features = settings.get("features", FINETUNE_FEATURES_BEFORE)  # common.migrations
        self.attention = Attention.named(settings["attention"])
        self.check(settings)
        self.backbone = backbone if backbone is not None else backbone_for(model)
        d_model, dropout = self.backbone.config.d_model, float(settings["head_dropout"])
        self.mix: ScalarMix | None = None
        if self.info.kind == "tagging":
            # Feature-based NER reads the last few layers (the BERT paper concatenates the top four), or ELMo's mix.
            self.n_feature_layers = min(int(settings["feature_layers"]), self.backbone.config.n_layers)
            n_layers = self.n_feature_layers if self.mode == "features" and self.features == "concat" else 1
            if self.mode == "features" and self.features == "scalar_mix":
                self.mix = ScalarMix(self.backbone.config.n_layers + 1)
            self.head: nn.Module = TaggingHead(d_model, len(self.info.labels), n_layers, dropout)
        else:
            n_outputs = 1 if self.info.kind == "regression" else len(self.info.labels)
            self.head = ClassificationHead(d_model, n_outputs, dropout)
        if self.mode == "features":
            self.backbone.requires_grad_(False)

    def check(self, settings: dict[str, Any]) -> None:
        if self.mode not in MODES:
            raise ArmlmError(f"finetune.mode={self.mode!r}; choose one of {MODES}")
        if self.pooling not in POOLINGS:
            raise ArmlmError(f"finetune.pooling={self.pooling!r}; choose one of {POOLINGS}")
        if self.features not in FEATURES:
            raise ArmlmError(f"finetune.features={self.features!r}; choose one of {FEATURES}")
        if self.features == "scalar_mix" and (self.mode != "features" or self.info.kind != "tagging"):
            raise ArmlmError("finetune.features=scalar_mix mixes a frozen backbone's layers for tagging: use it with "
                             "finetune.mode=features and task=conll2003")
        if self.attention.kind == "causal" and self.pooling == "first" and self.info.kind != "tagging":
            raise ArmlmError("finetune.pooling=first with causal attention pools a [CLS] that sees nothing else; "
                             "use pooling=last or mean, or finetune.attention=bidirectional")

    def own_rates(self) -> list[dict[str, Any]]:
        """ELMo's mix at task.optim.mix_lr where it is set: from equal weights, at the head's rate a 3-epoch CoNLL
        run leans toward a layer that carries the signal but does not commit to it (tests/test_scalar_mix.py)."""
        mix_lr = self.optim_settings.get("mix_lr")
        if self.mix is None or mix_lr is None:
            return []
        return [{"params": list(self.mix.parameters()), "lr": float(mix_lr)}]

    def train(self, mode: bool = True) -> FinetuneModule:
        super().train(mode)
        if self.mode == "features":
            self.backbone.eval()  # a frozen backbone gives the same features every epoch: no dropout
        return self

    def forward(self, batch: dict[str, Tensor]) -> Tensor:
        mask = batch["attention_mask"]
        kwargs = {"attention": self.attention, "token_type_ids": batch["token_type_ids"],
                  "attention_mask": None if bool(mask.all()) else mask}  # no padding: SDPA's fast path
        with torch.set_grad_enabled(torch.is_grad_enabled() and self.mode == "full"):
            if self.mix is not None:
                layers = self.backbone.layer_states(batch["input_ids"], with_embeddings=True, **kwargs)
            elif self.info.kind == "tagging" and self.mode == "features":
                states = torch.cat(self.backbone.layer_states(batch["input_ids"], **kwargs)[-self.n_feature_layers:],
                                   dim=-1)
            else:
                states = self.backbone(batch["input_ids"], **kwargs)
        if self.mix is not None:
            states = self.mix(layers)  # outside no_grad: the mix's weights learn
        if self.info.kind == "tagging":
            return self.head(states)
        return self.head(pool(states, mask, self.pooling))
