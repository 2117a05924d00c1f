"""One thin LightningModule for every objective: it calls `objective.loss(batch, model)` and logs.

Hyperparameters are plain dicts (model config, objective config with its `_target_`, optimiser), so
checkpoints load with `torch.load(..., weights_only=True)` and rebuild the same model and objective.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import lightning as L
import torch
from hydra.utils import instantiate
from torch import Tensor
from torchmetrics import MeanMetric

from armlm.common.errors import ArmlmError
from armlm.common.migrations import SCHEMA_VERSION, migrate_pretraining_checkpoint
from armlm.common.provenance import armlm_commit
from armlm.common.seeding import TRAIN_CORRUPTION, VAL_CORRUPTION, derived_seed, seed_dropout
from armlm.models.backbone import ModelConfig, Transformer
from armlm.models.flops import TRAINING_PASSES
from armlm.objectives.base import Batch, LossOutput, Objective, TrainingProgress
from armlm.training.callbacks import TokenAccounting, logs_this_step
from armlm.training.compiled import compile_loss
from armlm.training.gradients import ClipsUnscaledGradients, fused_adamw_allowed
from armlm.training.nonfinite import LOSS, NonFiniteLossError, StopsAtNonFinite
from armlm.training.optim import adamw_with_schedule, decay_start

log = logging.getLogger("armlm.train")
OWN_ALL = "all"  # the pooled scope of the gate's metrics: val/own_below_unigram


class PretrainModule(StopsAtNonFinite, ClipsUnscaledGradients, L.LightningModule):
    def __init__(self, model: dict[str, Any], objective: dict[str, Any], optim: dict[str, Any], seed: int = 0,
                 compile_step: dict[str, Any] | None = None, nonfinite_loss: str = "stop",
                 built_objective: Objective | None = None, init_from: list[dict[str, Any]] | None = None) -> None:
        """`objective` is the objective's config (with its `_target_`), kept in the checkpoint's hyperparameters;
        `built_objective`, if given, is that objective already built (train.py builds it to check the config
        before any data is read; an objective is built once per run), else it is built here.
        `nonfinite_loss` (checked in training.validate): "stop" raises NonFiniteLossError at a NaN/inf training
        loss; "skip" leaves the weights alone for that batch (no backward, no update; the step still counts)
        and counts it in train/skipped_batches. `init_from`: the lineage of a continued run (training.init_from),
        kept with the hyperparameters so every checkpoint and the TensorBoard run record the chain.
        `compile_step` (training.compiled.compile_loss's settings: mode, backend): the training step's loss, the
        objective's over the backbone, is compiled as one graph; None runs it eagerly."""
        super().__init__()
        self.save_hyperparameters(ignore=["built_objective"])
        self.model = Transformer(ModelConfig(**model))
        self.skipped_batches = 0
        self.objective: Objective = built_objective if built_objective is not None else instantiate(objective)
        if compile_step is not None and nonfinite_loss == "skip":
            raise ArmlmError("nonfinite_loss=skip reads every step's loss on the host, which a compiled step does not "
                             "(trainer.step.compile=true); use nonfinite_loss=stop, or trainer.step.compile=false")
        # The objective's loss over the backbone as one graph (the module's own objects: the state dict keeps its names)
        self.compiled_loss = None if compile_step is None else compile_loss(self.objective, self.model, **compile_step)
        # The devices' peak FLOP/s that train/mfu is a share of (train.py: trainer.step.mfu_peak_flops or the data
        # sheet's); None logs no MFU.
        self.peak_flops: float | None = None
        self.val_lm_nll = MeanMetric()
        self.val_extras = torch.nn.ModuleDict({name: MeanMetric() for name in self.objective.extra_metrics})
        # The unigram NLL of exactly the targets the objective's loss scored on held-out blocks, pooled ("all") and
        # per target scope (a mixture's components): the baseline of the learning gate (val/own_below_unigram).
        self.val_target_unigram = torch.nn.ModuleDict(
            {scope: MeanMetric() for scope in (OWN_ALL, *self.objective.target_scopes)})
        self.target_log_probs: Tensor | None = None
        self.tokenizer_json: str | None = None
        self.unigram_baseline: float | None = None
        # Positions 0..trained_length-1 are the only ones pretraining fed; fine-tuning caps its inputs there.
        self.trained_length: int | None = None
        self.last_finite_loss: float | None = None
        # The steps the learning-rate schedule spans, when the run's step cap is not them (a FLOPs budget).
        self.schedule_steps: int | None = None
        # The input tokens the run's budget spans (train.py), what an objective's schedule or phases are shares of.
        self.budget_tokens: int | None = None
        self.token_accounting: TokenAccounting | None = None

    # -- data-dependent state --------------------------------------------------------------------------
    def setup(self, stage: str) -> None:
        if self.hparams.nonfinite_loss == "skip" and self.trainer.world_size > 1:
            raise ArmlmError("nonfinite_loss=skip runs in one process only (DDP ranks would disagree on which "
                             "step to skip); use nonfinite_loss=stop with several processes")
        datamodule = getattr(self.trainer, "datamodule", None)
        if datamodule is not None and datamodule.vocabulary is not None:
            if datamodule.vocabulary.size != self.model.config.vocab_size:
                raise ArmlmError(
                    f"tokenizer has {datamodule.vocabulary.size} tokens but model.vocab_size="
                    f"{self.model.config.vocab_size}; they must match (the checkpoint and data disagree)"
                )
            self.objective.set_vocabulary(datamodule.vocabulary)
            self.tokenizer_json = datamodule.tokenizer_json
            self.unigram_baseline = datamodule.unigram_baseline
            self.target_log_probs = torch.from_numpy(datamodule.vocabulary.target_unigram_log_probs()).float()
            self.trained_length = int(datamodule.block_size)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.check_finite()  # before anything is written
        # The tokenizer travels with the weights, so fine-tuning needs nothing but the checkpoint.
        checkpoint["tokenizer_json"] = self.tokenizer_json
        checkpoint["trained_length"] = self.trained_length
        checkpoint["skipped_batches"] = self.skipped_batches
        checkpoint["armlm_commit"] = armlm_commit()  # the code that wrote it, for exported model cards
        checkpoint["schema_version"] = SCHEMA_VERSION

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        migrate_pretraining_checkpoint(checkpoint)
        self.tokenizer_json = checkpoint.get("tokenizer_json")
        self.skipped_batches = int(checkpoint["skipped_batches"])

    def on_train_start(self) -> None:
        # The tokens seen so far live in the TokenAccounting callback, restored from a checkpoint before this hook.
        self.token_accounting = next((c for c in self.trainer.callbacks if isinstance(c, TokenAccounting)), None)
        if self.objective.needs_progress and (self.token_accounting is None or not self.budget_tokens):
            raise ArmlmError(f"{type(self.objective).__name__} follows the token budget (phases or a mask-rate "
                             "schedule): give max_tokens=... (or data_epochs=..., or trainer.max_steps with "
                             "max_tokens=null), not a FLOPs budget")

    def progress(self) -> TrainingProgress | None:
        if self.token_accounting is None or not self.budget_tokens:
            return None
        return TrainingProgress(self.token_accounting.tokens_seen, self.budget_tokens)

    # -- steps ------------------------------------------------------------------------------------------
    def corruption_generator(self, stream: int, *indices: int) -> torch.Generator:
        """A generator on the model's device seeded from (run seed, stream, indices, rank): the same batch
        gets the same corruption on every run and after a resume, and DDP ranks differ."""
        seed = derived_seed(self.hparams.seed, stream, *indices, self.global_rank)
        return torch.Generator(device=self.device).manual_seed(seed)

    @property
    def reads_every_step(self) -> bool:
        """Whether a step may read device values on the host: eagerly on a CPU, where reading costs nothing, or where
        nonfinite_loss=skip needs every loss. Otherwise (a compiled step, a GPU) the loss's finiteness, the counts and
        the logged scalars are read once per trainer.log_every_n_steps (and at checkpoints)."""
        return (self.device.type == "cpu" and self.compiled_loss is None) or self.hparams.nonfinite_loss == "skip"

    def training_step(self, batch: Batch, batch_idx: int) -> dict[str, Tensor] | None:
        if self.objective.needs_progress:
            self.objective.set_progress(self.progress())
        if self.objective.phase is not None and self.token_accounting is not None:
            self.token_accounting.phase_started(self.objective.phase)
        if self.compiled_loss is not None:
            # One seeded global stream draws the corruption, then dropout: a graph takes no generator argument.
            torch.manual_seed(derived_seed(self.hparams.seed, TRAIN_CORRUPTION, self.current_epoch, batch_idx,
                                           self.global_rank))
            out = self.compiled_loss(batch)
        else:
            seed_dropout(self.hparams.seed, self.current_epoch, batch_idx, self.global_rank)
            generator = self.corruption_generator(TRAIN_CORRUPTION, self.current_epoch, batch_idx)
            out = self.objective.loss(batch, self.model, generator)
        if not self.reads_every_step:
            self.note_nonfinite(LOSS, out.loss.detach())
            if logs_this_step(self.trainer):
                self.check_finite()
                self.log_step(out)
            return self.step_outputs(out)
        loss_value = float(out.loss.detach())
        if not math.isfinite(loss_value) and self.hparams.nonfinite_loss == "skip":
            self.skipped_batches += 1
            log.warning("training loss is %s at step %d (epoch %d, batch %d): batch skipped (%d so far)", loss_value,
                        self.global_step, self.current_epoch, batch_idx, self.skipped_batches)
            self.log("train/skipped_batches", float(self.skipped_batches))
            return None  # Lightning then runs no backward and the optimiser finds no gradients
        if not math.isfinite(loss_value):
            raise NonFiniteLossError(
                f"training loss is {loss_value} at step {self.global_step} (epoch {self.current_epoch}, batch "
                f"{batch_idx}); last finite loss {self.last_finite_loss}. Stopped before the optimiser step: the "
                "last saved checkpoint is intact. Lower optim.lr, raise optim.warmup_steps or check the data "
                "(or set nonfinite_loss=skip to skip such batches)."
            )
        self.last_finite_loss = loss_value
        if logs_this_step(self.trainer):
            self.log_step(out)
        return self.step_outputs(out)

    def log_step(self, out: LossOutput) -> None:
        self.log("train/loss", out.loss, prog_bar=True)
        self.log("train/lm_loss", out.lm_nll_sum / torch.as_tensor(out.predicted_tokens).clamp(min=1))
        for name, (value, _) in out.extras.items():
            self.log(f"train/{name}", value)

    @staticmethod
    def step_outputs(out: LossOutput) -> dict[str, Any]:
        return {"loss": out.loss, "input_tokens": out.input_tokens, "predicted_tokens": out.predicted_tokens,
                "flops": TRAINING_PASSES * out.forward_flops}

    def on_validation_epoch_start(self) -> None:
        self.objective.set_progress(None)  # an objective with a schedule validates at its end-of-training setting

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        with self.model.recording_targets() as recorded:
            out = self.objective.loss(batch, self.model, self.corruption_generator(VAL_CORRUPTION, batch_idx))
        self.update_target_unigram(recorded)
        if out.predicted_tokens > 0:
            self.val_lm_nll.update(out.lm_nll_sum / out.predicted_tokens, weight=out.predicted_tokens)
        for name, (value, count) in out.extras.items():
            self.val_extras[name].update(value, weight=count)

    def update_target_unigram(self, recorded: list[tuple[str, Tensor]]) -> None:
        """Adds the unigram NLL of the targets the loss scored, pooled and under each scope they were scored in."""
        if self.target_log_probs is None:
            return
        if self.target_log_probs.device != self.device:
            self.target_log_probs = self.target_log_probs.to(self.device)
        for scope, targets in recorded:
            if not targets.numel():
                continue
            nll = -self.target_log_probs[targets]
            component = scope.split("/")[0]  # a nested scope counts towards its top-level component
            for name in (OWN_ALL, component):
                if name in self.val_target_unigram:
                    self.val_target_unigram[name].update(nll.mean(), weight=nll.numel())

    def on_validation_epoch_end(self) -> None:
        # val/loss is the LM NLL per predicted token for every objective, so runs overlay; val/ppl = exp of it.
        values: dict[str, Tensor] = {}
        if self.val_lm_nll.update_count:
            nll = values["loss"] = self.val_lm_nll.compute()
            self.log("val/loss", nll, prog_bar=True)
            self.log("val/ppl", torch.exp(nll))
            self.log(f"val/nll_{self.objective.val_loss_kind}", nll)  # the same figure, named for what it is
        for name, metric in self.val_extras.items():
            if metric.update_count:
                value = values[name] = metric.compute()
                self.log(f"val/{name}", value)
                if name in self.objective.perplexity_of:
                    self.log(f"val/{self.objective.perplexity_of[name]}", torch.exp(value))
            metric.reset()
        self.val_lm_nll.reset()
        self.log_own_margins(values)
        if self.unigram_baseline is not None:
            self.log("val/unigram_baseline", self.unigram_baseline)

    def log_own_margins(self, values: dict[str, Tensor]) -> None:
        """The learning gate's quantity, each arm read as it is used: the unigram NLL of the targets its own loss
        scored minus that loss (val/own_below_unigram; a mixture's components also as val/own_below_unigram_<name>,
        against val/loss_<name>), or, for an objective with a baseline of its own (Objective.own_baseline), that
        baseline minus the loss."""
        own = {OWN_ALL: self.objective.own_loss_metric, **{s: f"loss_{s}" for s in self.objective.target_scopes}}
        baseline = self.objective.own_baseline(values)
        for scope, metric in self.val_target_unigram.items():
            if scope == OWN_ALL and baseline is not None:  # a loss not over tokens, read against its own baseline
                unigram = baseline if own[scope] in values else None
            else:
                unigram = metric.compute() if metric.update_count and own[scope] in values else None
            if unigram is not None:
                suffix = "" if scope == OWN_ALL else f"_{scope}"
                self.log(f"val/own_unigram{suffix}", unigram)
                self.log(f"val/own_below_unigram{suffix}", unigram - values[own[scope]])
            metric.reset()

    # -- optimisation -----------------------------------------------------------------------------------
    def planned_steps(self) -> int:
        """The optimiser steps this run plans: a FLOPs budget's schedule (training.run sets it; the run ends there,
        before the trainer's step cap), else the trainer's estimate. The schedule and the progress lines read it."""
        return self.schedule_steps or int(self.trainer.estimated_stepping_batches)

    def configure_optimizers(self) -> dict[str, Any]:
        cfg = self.hparams.optim
        total = self.planned_steps()
        warmup = int(cfg["warmup_steps"])
        return adamw_with_schedule(
            self, lr=cfg["lr"], weight_decay=cfg["weight_decay"], betas=tuple(cfg["betas"]), eps=cfg["eps"],
            warmup_steps=warmup, total_steps=total, min_lr_ratio=float(cfg["min_lr_ratio"]),
            fused=fused_adamw_allowed(self), decay_start=decay_start(total, warmup, cfg.get("decay_fraction")),
        )
