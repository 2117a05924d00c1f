"""What every fine-tuning module shares, whatever gives it features: the task's loss, word-level predictions,
official metrics on every dev split, checkpoint contents and the optimiser. A subclass says how a batch becomes
head outputs (`forward`): a pretrained backbone (finetune.module) or static word vectors (finetune.static)."""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from armlm.common.migrations import SCHEMA_VERSION, task_info_defaults
from armlm.common.provenance import armlm_commit
from armlm.common.seeding import seed_dropout
from armlm.datamodules.finetune import TaskInfo
from armlm.finetune.artefacts import metric_tag
from armlm.finetune.metrics import task_metrics
from armlm.training.gradients import ClipsUnscaledGradients, fused_adamw_allowed
from armlm.training.nonfinite import StopsAtNonFinite
from armlm.training.optim import adamw_with_schedule


class TaskModule(StopsAtNonFinite, ClipsUnscaledGradients, L.LightningModule):
    # a fine-tuning step is eager and reads its loss every step (training_step), so a NaN/inf gradient norm is read
    # at once too: the run stops before the optimiser applies it
    reads_every_step = True

    def __init__(self, task: dict[str, Any], optim: dict[str, Any], seed: int) -> None:
        super().__init__()
        self.info = TaskInfo(**task_info_defaults(task))  # checkpoints before schema 2 name no metrics
        self.val_metrics = nn.ModuleList(task_metrics(self.info) for _ in self.info.eval_splits)
        self.tokenizer_json: str | None = None
        self.final_scores: dict[str, dict[str, float]] = {}  # the last evaluation, per dev split
        # split -> metric -> one list per evaluation (epoch) of each dev item's statistics, for the metrics that
        # give them (EntityF1.item_counts): what a bootstrap over dev items resamples (items.json)
        self.item_scores: dict[str, dict[str, list[list[list[int]]]]] = {}
        self.optim_settings, self.seed = optim, seed

    @abstractmethod
    def forward(self, batch: dict[str, Tensor]) -> Tensor:
        """Head outputs: (B, classes), (B, 1) for regression, (B, T, tags) for tagging."""

    @property
    def grad_norm_tag(self) -> str:
        return f"{self.info.name}/train/grad_norm"  # beside <task>/train/loss

    def loss(self, outputs: Tensor, labels: Tensor) -> Tensor:
        if self.info.kind == "regression":
            return F.mse_loss(outputs.squeeze(-1).float(), labels.float())
        return F.cross_entropy(outputs.flatten(0, -2).float(), labels.flatten())  # IGNORE_INDEX is skipped

    def predictions(self, outputs: Tensor, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """(predicted, gold) in the form the task's metrics take: word-level tags for NER, where a word the
        length limit cut off is predicted 'O' (a miss, as conlleval would count it)."""
        if self.info.kind == "regression":
            return outputs.squeeze(-1).float(), batch["labels"]
        predicted = outputs.argmax(dim=-1)
        if self.info.kind != "tagging":
            return predicted, batch["labels"]
        positions = batch["word_positions"]
        words = predicted.gather(1, positions.clamp(min=0))
        words = words.masked_fill(positions < 0, self.info.labels.index("O"))
        return words, batch["word_labels"]

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        seed_dropout(self.seed, self.current_epoch, batch_idx, self.global_rank)
        loss = self.loss(self(batch), batch["labels"])
        if not torch.isfinite(loss):
            raise FloatingPointError(f"{self.info.name}: training loss is {float(loss)} at step {self.global_step}; "
                                     "lower task.optim.lr or check the pretrained checkpoint")
        self.log(f"{self.info.name}/train/loss", loss, prog_bar=True, batch_size=batch["labels"].shape[0])
        return loss

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int, dataloader_idx: int = 0) -> None:
        predicted, gold = self.predictions(self(batch), batch)
        self.val_metrics[dataloader_idx].update(predicted, gold)

    def on_validation_epoch_end(self) -> None:
        for split, metrics in zip(self.info.eval_splits, self.val_metrics):
            scores = metrics.compute()
            for name, metric in metrics.items():
                if hasattr(metric, "item_counts"):
                    self.item_scores.setdefault(split, {}).setdefault(name, []).append(metric.item_counts())
            for name, value in scores.items():
                self.log(metric_tag(self.info.name, split, name), value, add_dataloader_idx=False)
            self.final_scores[split] = {name: float(value) for name, value in scores.items()}
            metrics.reset()

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["tokenizer_json"] = self.tokenizer_json  # a fine-tuned model can then encode new text
        checkpoint["final_scores"] = self.final_scores  # a run resumed after its last epoch still reports them
        checkpoint["item_scores"] = self.item_scores
        checkpoint["armlm_commit"] = armlm_commit()
        checkpoint["schema_version"] = SCHEMA_VERSION

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.tokenizer_json = checkpoint.get("tokenizer_json")
        self.final_scores = checkpoint.get("final_scores", {})
        self.item_scores = checkpoint.get("item_scores", {})

    def configure_optimizers(self) -> dict[str, Any]:
        cfg = self.optim_settings
        total = int(self.trainer.estimated_stepping_batches)
        return adamw_with_schedule(
            self, lr=float(cfg["lr"]), weight_decay=float(cfg["weight_decay"]), betas=tuple(cfg["betas"]),
            eps=float(cfg["eps"]), warmup_steps=round(float(cfg["warmup_ratio"]) * total), total_steps=total,
            min_lr_ratio=0.0, fused=fused_adamw_allowed(self), own_rates=self.own_rates(),
        )

    def own_rates(self) -> list[dict[str, Any]]:
        """Parameter groups that learn at a rate of their own (none here; FinetuneModule: ELMo's mix)."""
        return []
