"""Feature-based NER on static word vectors: `python train.py task=conll2003 vectors=<`armlm embeddings` folder>`.

The sentence is encoded with the vectors' own tokenizer (the pretraining one), exactly as a checkpoint's NER
run encodes it, so the same words reach the length cut and are scored as misses. Each word's vector (the mean of
its pieces' vectors, embeddings.store) sits at its first subword, where the tagging head of
`finetune.mode=features` reads it, each dimension standardised over the method's vocabulary (word_table). A word
with no vector reads zeros, the vocabulary's mean (fastText builds one from n-grams, the other methods have none:
results.json reports the share). The head is the position-wise TaggingHead, so the tagger sees no neighbouring
word: static vectors bring no context, which is what the comparison asks."""

from __future__ import annotations

import logging
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from torch import Tensor

from armlm.common.errors import ArmlmError
from armlm.common.migrations import migrate_finetune_hparams
from armlm.datamodules.finetune import ConllDataModule
from armlm.embeddings.store import StaticVectors, load_vectors
from armlm.embeddings.words import WordSplitter
from armlm.finetune.preflight import FIXED_TRAINER_SETTINGS, check_config
from armlm.finetune.run import at_length_cap, finite_or_none, majority_baseline
from armlm.finetune.task_module import TaskModule
from armlm.models.checkpoint import read_hyperparameters
from armlm.models.heads import TaggingHead
from armlm.training.devices import check_machine
from armlm.training.setup import build, choose_cpu_precision, differences
from armlm.training.step_config import use_matmul_precision
from armlm.training.trainer import build_trainer, checkpoints, write_result

log = logging.getLogger("armlm.finetune")


class StaticTagger(TaskModule):
    def __init__(self, task: dict[str, Any], words: int, dim: int, optim: dict[str, Any], vectors: dict[str, Any],
                 head_dropout: float = 0.1, seed: int = 0) -> None:
        """`words` rows of `dim` numbers (filled by the caller, word_table; row 0 stays zero: no vector)."""
        super().__init__(task, optim, seed)
        self.save_hyperparameters()
        if self.info.kind != "tagging":
            raise ArmlmError(f"vectors= gives word vectors, which tag words: task={self.info.name} is not a tagging "
                             "task; use task=conll2003, or pretrained=<checkpoint> for sentence tasks")
        self.register_buffer("table", torch.zeros(words + 1, dim))
        self.head = TaggingHead(dim, len(self.info.labels), 1, head_dropout)

    def forward(self, batch: dict[str, Tensor]) -> Tensor:
        positions, ids = batch["word_positions"], batch["word_vector_ids"]  # (B, words)
        features = self.table.new_zeros(*batch["input_ids"].shape, self.table.shape[1])  # (B, T, dim)
        placed = positions >= 0  # words the length cut left in
        rows = torch.arange(positions.shape[0], device=positions.device)[:, None].expand_as(positions)
        features[rows[placed], positions[placed]] = self.table[ids[placed]]
        return self.head(features)


def word_table(vectors: StaticVectors, words: set[str]) -> tuple[dict[str, int], np.ndarray]:
    """Each task word's row (from 1) and the table; row 0 (words with no vector) is the vocabulary's mean vector.
    Every dimension is standardised over the method's vocabulary (mean 0, sd 1), as the backbone's final norm puts
    a checkpoint's states on one scale: raw skip-gram vectors are on a far smaller one, and a linear head at the
    task's step learned nothing from them in one epoch, which measured the step size, not the vectors
    (docs/results/embeddings.md and docs/results/performance.md, "Figures moved out of code comments")."""
    splitter = WordSplitter(vectors.tokenizer_json)
    mean, sd = vectors.keyed.vectors.mean(axis=0), vectors.keyed.vectors.std(axis=0)
    sd[sd == 0] = 1.0
    found = {}
    for word in sorted(words):
        vector = vectors.word_vector(word, splitter)
        if vector is not None:
            found[word] = (vector - mean) / sd  # the mean of standardised pieces: the transform is affine
    index = {word: row for row, word in enumerate(found, start=1)}
    table = np.zeros((len(found) + 1, vectors.dim), dtype=np.float32)
    for word, row in index.items():
        table[row] = found[word]
    return index, table


def no_vector_share(datamodule: ConllDataModule, index: dict[str, int]) -> dict[str, float]:
    """Per split, the share of word tokens with no vector (they read row 0)."""
    shares = {}
    for split, examples in datamodule.encoded.items():
        words = [w for e in examples for w in e.words]
        shares[split] = round(sum(w not in index for w in words) / max(1, len(words)), 4)
    return shares


def check_static_resumable(ckpt_path: Path, hparams: dict[str, Any]) -> None:
    saved = read_hyperparameters(ckpt_path)
    keys = ("task", "words", "dim", "optim", "vectors", "head_dropout", "seed")
    if not isinstance(saved, dict) or "vectors" not in saved:
        raise ArmlmError(f"{ckpt_path} is not a static-vectors NER checkpoint; ckpt_path= with vectors=... resumes one")
    saved = migrate_finetune_hparams(saved)
    differing = differences({k: hparams[k] for k in keys}, {k: saved.get(k) for k in keys})
    if differing:
        raise ArmlmError(f"{ckpt_path} was saved by a run with other settings ({', '.join(differing)}); resume "
                         "with the settings it was started with, or start afresh without ckpt_path")


def run_static_finetune(cfg: DictConfig) -> dict[str, Any]:
    started = time.perf_counter()
    check_config(cfg)
    check_machine(cfg)
    vectors = load_vectors(cfg.vectors)
    L.seed_everything(cfg.seed, workers=True)
    choose_cpu_precision(cfg)
    datamodule = build(cfg.task.data, tokenizer_json=vectors.tokenizer_json, seed=cfg.seed)
    if not isinstance(datamodule, ConllDataModule):
        raise ArmlmError(f"vectors= tags words: task={cfg.task.data._target_} is not CoNLL-2003 NER; use task=conll2003")
    datamodule.setup("fit")
    index, table = word_table(vectors, datamodule.words())
    datamodule.index_words(index)
    optim = OmegaConf.to_container(cfg.task.optim, resolve=True)
    optim["lr"] = optim.pop("features_lr")  # only the head learns, as with finetune.mode=features
    summary = {"folder": str(vectors.path), **{k: vectors.summary.get(k) for k in ("method", "settings", "seed")}}
    module = StaticTagger(task=asdict(datamodule.info), words=len(index), dim=vectors.dim, optim=optim, vectors=summary,
                          head_dropout=float(cfg.finetune.dropout), seed=int(cfg.seed))
    module.table.copy_(torch.from_numpy(table))
    module.tokenizer_json = vectors.tokenizer_json
    use_matmul_precision(cfg.trainer)
    if cfg.ckpt_path:
        check_static_resumable(Path(cfg.ckpt_path), dict(module.hparams))
    out = Path(cfg.output_dir)
    trainer = build_trainer(cfg.trainer, out, checkpoints(out), cfg.get("logger"), max_epochs=int(cfg.task.epochs),
                            **FIXED_TRAINER_SETTINGS)
    log.info("feature-based %s on static vectors %s (%s), %d task words with a vector; run folder %s",
             datamodule.info.name, vectors.path, summary["method"], len(index), out)
    trainer.fit(module, datamodule=datamodule, ckpt_path=cfg.ckpt_path)
    results = {
        "task": datamodule.info.name, "primary_metric": datamodule.info.primary_metric,
        "vectors": summary, "objective": None, "seed": int(cfg.seed),
        "mode": "features", "features": "static, standardised per dimension", "attention": None, "optim": optim, "epochs": int(cfg.task.epochs),
        "batch_size": datamodule.batch_size, "max_length": datamodule.max_length,
        "at_length_cap": at_length_cap(datamodule), "no_vector_share": no_vector_share(datamodule, index),
        "examples": {split: len(e) for split, e in datamodule.encoded.items()},
        "metrics": {split: {k: finite_or_none(v) for k, v in scores.items()}
                    for split, scores in module.final_scores.items()},
        "majority_baseline": majority_baseline(datamodule, datamodule.info), "steps": trainer.global_step,
        "wall_seconds": round(time.perf_counter() - started, 1),
        "finetuned_checkpoint": str(out / "checkpoints" / "last.ckpt"),
    }
    write_result(trainer, out / "results.json", results)
    log.info("%s dev scores: %s, %.0f s", datamodule.info.name, results["metrics"], results["wall_seconds"])
    return results
