"""`armlm finetune task=<name> pretrained=<checkpoint or run folder>`: fine-tune, evaluate every dev
split after each epoch, and write `results.json` (task, checkpoint, objective, seed, settings, every
metric on every dev split, the majority-class baseline, wall time)."""

from __future__ import annotations

import logging
import time
import warnings
from dataclasses import asdict
from pathlib import Path
from typing import Any

import lightning as L
import torch
from omegaconf import DictConfig, OmegaConf

from armlm.common.errors import ArmlmError
from armlm.common.migrations import migrate_finetune_hparams
from armlm.datamodules.finetune import FinetuneDataModule, TaskInfo
from armlm.finetune.artefacts import ITEMS_FILE
from armlm.finetune.metrics import item_record, task_metrics
from armlm.finetune.module import FinetuneModule
from armlm.finetune.preflight import FIXED_TRAINER_SETTINGS, check_config
from armlm.models.checkpoint import read_hyperparameters
from armlm.sources import ModelSource, open_source
from armlm.training.devices import check_machine
from armlm.training.setup import build, choose_cpu_precision, differences
from armlm.training.step_config import attention_kernels, step_settings, use_matmul_precision
from armlm.training.trainer import build_trainer, checkpoints, write_items, write_result

log = logging.getLogger("armlm.finetune")
# finetune.mode=features keeps its frozen backbone in eval mode on purpose (FinetuneModule.train: no dropout), which
# Lightning 2.5.5+ warns about at every fit
warnings.filterwarnings("ignore", message=r"Found \d+ module\(s\) in eval mode at the start of training")
ATTENTION_MODES = ("pretrained", "bidirectional", "causal")


def resolve_settings(cfg: DictConfig, source: ModelSource) -> dict[str, Any]:
    """The module's settings: `attention: pretrained` becomes the source's own mode, `pooling: auto`
    the state that sees the whole input in that mode. An attention the backbone cannot run is refused."""
    if cfg.attention not in ATTENTION_MODES:
        raise ArmlmError(f"finetune.attention={cfg.attention!r}; choose one of {ATTENTION_MODES}")
    attention = source.reading.finetune_attention if cfg.attention == "pretrained" else cfg.attention
    source.reading.refuse_attention(attention, f"finetune.attention={attention}")
    # A causal reader's state sees the whole input (pooling) or the whole word (tagging) only at its end.
    seen_whole = "last" if attention == "causal" else "first"
    pooling = seen_whole if cfg.pooling == "auto" else cfg.pooling
    word_subword = seen_whole if cfg.word_subword == "auto" else cfg.word_subword
    return {"mode": cfg.mode, "attention": attention, "pooling": pooling, "word_subword": str(word_subword),
            "head_dropout": float(cfg.dropout),
            "feature_layers": int(cfg.feature_layers), "features": str(cfg.features)}


def trained_max_length(requested: int, source: ModelSource) -> int:
    """The input length fine-tuning uses: the task's, cut to the positions pretraining trained (a transformers
    model's: the positions it takes). Learned position rows beyond the pretraining block keep their initial values,
    and even rotary attention never saw those distances, so reading them would measure initialisation, not
    pretraining."""
    trained = source.trained_positions
    if trained is None:
        log.warning("%s does not record its pretraining block size (written before armlm kept it): positions "
                    "up to task.data.max_length=%d are used, some perhaps untrained", source.origin, requested)
        return requested
    if requested > trained:
        log.warning("task.data.max_length=%d exceeds the %d positions %s was pretrained on: inputs are cut to %d "
                    "tokens (results.json records the share of examples that reach the cut); pretrain with "
                    "data.block_size=%d to use them all", requested, trained, source.origin, trained, requested)
        return trained
    return requested


def at_length_cap(datamodule: FinetuneDataModule) -> dict[str, float]:
    """Per split, the share of examples whose encoding fills max_length: those were cut (or fit exactly)."""
    return {split: round(sum(len(e.input_ids) >= datamodule.max_length for e in examples) / max(1, len(examples)), 4)
            for split, examples in datamodule.encoded.items()}


def check_fit(datamodule: FinetuneDataModule, source: ModelSource, requested: int) -> None:
    """The model must take the task's inputs (`requested`: task.data.max_length as given, before the cut to the
    trained length) and every id of its tokenizer; name the keys that disagree."""
    positions = int(source.backbone.config.max_len)
    if requested > positions:  # the length used is never above the one requested
        raise ArmlmError(f"task.data.max_length={requested} exceeds the checkpoint's model.max_len={positions} "
                         f"({source.origin}); lower task.data.max_length")
    source.check_vocabulary(datamodule.tokenizer.get_vocab_size())


def majority_baseline(datamodule: FinetuneDataModule, info: TaskInfo) -> dict[str, dict[str, float | None]]:
    """The official metrics of always predicting the most frequent training label (mean score for STS-B,
    'O' for NER) on every dev split: the floor a fine-tuned model has to clear."""
    majority = datamodule.majority_label()
    scores = {}
    for split in info.eval_splits:
        batch = datamodule.collate(datamodule.encoded[split])
        gold = batch["word_labels"] if info.kind == "tagging" else batch["labels"]
        metrics = task_metrics(info)
        with warnings.catch_warnings():  # constant predictions: correlations are undefined (NaN), say so
            warnings.simplefilter("ignore")
            metrics.update(torch.full_like(gold, majority), gold)
            scores[split] = {k: finite_or_none(v) for k, v in metrics.compute().items()}
    return scores


def finite_or_none(value: torch.Tensor | float) -> float | None:
    value = float(value)
    return round(value, 6) if value == value and abs(value) != float("inf") else None


def check_finetune_resumable(ckpt_path: Path, hparams: dict[str, Any]) -> None:
    """ckpt_path= resumes an interrupted fine-tuning run from its checkpoints/last.ckpt (saved at each epoch
    end); the checkpoint must come from the same task, settings, model, optimiser and seed."""
    saved = read_hyperparameters(ckpt_path)
    if not isinstance(saved, dict) or "task" not in saved:
        raise ArmlmError(f"{ckpt_path} is not a fine-tuning checkpoint; ckpt_path= with task=... resumes one "
                         "(pretrained= gives the pretraining checkpoint)")
    keys = ("model", "task", "settings", "optim", "pretrained", "seed")
    saved = migrate_finetune_hparams(saved)
    differing = differences({k: hparams[k] for k in keys}, {k: saved.get(k) for k in keys})
    if differing:
        raise ArmlmError(f"{ckpt_path} was saved by a run with other settings ({', '.join(differing)}); resume "
                         "with the settings it was started with, or start afresh without ckpt_path")


def input_mask_share(datamodule: FinetuneDataModule, mask_id: int | None) -> float:
    """The share of [MASK] among the training inputs' tokens: zero for natural text, against the
    objective's share in pretraining (val/mask_share), which is the [MASK] pretrain-finetune discrepancy."""
    if mask_id is None:  # a tokenizer without a mask token
        return 0.0
    examples = datamodule.encoded["train"]
    masks = sum(example.input_ids.count(mask_id) for example in examples)
    return masks / max(1, sum(len(example.input_ids) for example in examples))


def run_finetune(cfg: DictConfig) -> dict[str, Any]:
    started = time.perf_counter()
    check_config(cfg)
    check_machine(cfg)
    trust = bool(cfg.get("trust_remote_code", False))
    source = open_source(cfg.pretrained, trust_remote_code=trust)
    settings = resolve_settings(cfg.finetune, source)
    dropout = float(cfg.finetune.dropout)
    L.seed_everything(cfg.seed, workers=True)
    choose_cpu_precision(cfg)
    requested_length = int(cfg.task.data.max_length)
    tokenizer_json = source.tokenizer.to_str()
    datamodule: FinetuneDataModule = build(cfg.task.data, tokenizer_json=tokenizer_json, seed=cfg.seed,
                                           adjusted={"max_length": trained_max_length(requested_length, source)})
    check_fit(datamodule, source, requested_length)
    datamodule.use_frame(source.special.task_frame())
    datamodule.read_words_at(settings["word_subword"])
    datamodule.setup("fit")
    info = datamodule.info
    optim = OmegaConf.to_container(cfg.task.optim, resolve=True)
    features_lr = optim.pop("features_lr")
    if settings["mode"] == "features":
        optim["lr"] = features_lr
    # the backbone opened above is the one trained (each model loaded once); the hyperparameters say how to rebuild it
    module = FinetuneModule(model=source.finetune_model(dropout, trust), task=asdict(info), settings=settings,
                            optim=optim, pretrained=source.summary(), seed=int(cfg.seed),
                            backbone=source.finetune_backbone(dropout))
    module.tokenizer_json = tokenizer_json
    module.fused_adamw = step_settings(cfg.trainer)["fused_adamw"]
    use_matmul_precision(cfg.trainer)
    if cfg.ckpt_path:
        check_finetune_resumable(Path(cfg.ckpt_path), dict(module.hparams))

    out = Path(cfg.output_dir)
    # trainer.max_steps is honoured (the run validates at the step it stops); the validation settings are fixed.
    trainer = build_trainer(cfg.trainer, out, checkpoints(out), cfg.get("logger"), max_epochs=int(cfg.task.epochs),
                            **FIXED_TRAINER_SETTINGS)
    log.info("fine-tuning %s on %s: %s, lr %g, %d epochs, %d training examples; run folder %s", source.origin,
             info.name, settings, optim["lr"], cfg.task.epochs, len(datamodule.encoded["train"]), out)
    with attention_kernels(cfg.trainer):
        trainer.fit(module, datamodule=datamodule, ckpt_path=cfg.ckpt_path)

    results = {
        "task": info.name,
        "primary_metric": info.primary_metric,  # the value plots and findings read (task.primary_metric)
        "pretrained": source.summary(),
        "objective": source.name,
        "seed": int(cfg.seed),
        "mode": settings["mode"],
        "attention": settings["attention"],
        "pooling": settings["pooling"] if info.kind != "tagging" else None,
        "word_subword": settings["word_subword"] if info.kind == "tagging" else None,
        "optim": optim,
        "epochs": int(cfg.task.epochs),
        "max_steps": int(cfg.trainer.max_steps),  # -1: the epochs decide
        "batch_size": datamodule.batch_size,
        "max_length": datamodule.max_length,
        "requested_max_length": requested_length,
        "trained_length": source.trained_length,
        "at_length_cap": at_length_cap(datamodule),
        "examples": {split: len(e) for split, e in datamodule.encoded.items()},
        "metrics": {split: {k: finite_or_none(v) for k, v in scores.items()}
                    for split, scores in module.final_scores.items()},
        "majority_baseline": majority_baseline(datamodule, info),
        "input_mask_share": input_mask_share(datamodule, source.special.mask),
        # ELMo's mix as learned (softmax weights, layer 0 the embeddings, and gamma): how far it moved from uniform
        "scalar_mix": None if module.mix is None else {
            "weights": [round(float(w), 4) for w in module.mix.weights.detach().softmax(0)],
            "gamma": round(float(module.mix.gamma.detach()), 4)},
        "steps": trainer.global_step,
        "wall_seconds": round(time.perf_counter() - started, 1),
        "finetuned_checkpoint": str(out / "checkpoints" / "last.ckpt"),
    }
    # Each dev item's statistics after every epoch (a bootstrap over dev items reads them), before the done file
    write_items(trainer, out / ITEMS_FILE, item_record(info, module, datamodule.clusters))
    write_result(trainer, out / "results.json", results)
    log.info("%s dev scores: %s (majority baseline %s), %.0f s", info.name, results["metrics"],
             results["majority_baseline"], results["wall_seconds"])
    return results

