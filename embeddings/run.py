"""`armlm embeddings`: train one static method on the pretraining corpus, or pool a checkpoint's states into
type-level vectors per layer; score either on the word benchmarks and write `words.json` (and, for a static
method, the vectors folder of embeddings.store)."""

from __future__ import annotations

import logging
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from hydra.utils import instantiate
from omegaconf import DictConfig

from armlm.common.atomic import atomic_write_artefact
from armlm.common.errors import ArmlmError
from armlm.common.rules import Rule, any_value, at_least, check_rules
from armlm.embeddings.benchmarks import score
from armlm.embeddings.contextual import type_vectors
from armlm.embeddings.cooccurrence import vocabulary
from armlm.embeddings.methods import StaticMethod, keyed
from armlm.embeddings.store import save_vectors
from armlm.embeddings.words import WordSplitter
from armlm.models.attention import Attention
from armlm.sources import open_source
from armlm.training.setup import build

log = logging.getLogger("armlm.embeddings")
logging.getLogger("gensim").setLevel(logging.WARNING)  # one line per epoch and per save otherwise
RESULT = "words.json"


def train_split_words(cfg: DictConfig, tokenizer_json: str) -> tuple[WordSplitter, list[list[str]], Counter[str]]:
    """The train split's lines as words, and every word's count there."""
    splitter = WordSplitter(tokenizer_json)
    corpus = instantiate(cfg.data.corpus)
    sentences = splitter.sentences(corpus.documents("train"))
    counts = Counter(word for sentence in sentences for word in sentence)
    if not counts:
        raise ArmlmError(f"{corpus.describe()} has no words in its train split; point data= at real text")
    log.info("%s: %d lines, %d words, %d distinct", corpus.describe(), len(sentences), sum(counts.values()), len(counts))
    return splitter, sentences, counts


def run_static(cfg: DictConfig) -> dict[str, Any]:
    started = time.perf_counter()
    method: StaticMethod = build(cfg.method)  # its own checks' lines, not Hydra's wrapping of them
    datamodule = build(cfg.data, seed=int(cfg.seed))
    datamodule.setup("fit")  # the pretraining cache's tokenizer: the same word splitting as the checkpoints
    splitter, sentences, counts = train_split_words(cfg, datamodule.tokenizer_json)
    log.info("training %s %s, seed %d", method.name, method.settings(), cfg.seed)
    vectors = method.train(sentences, int(cfg.seed))
    trained = time.perf_counter() - started
    scores = score(vectors, splitter, counts, int(cfg.benchmarks.rare_below))
    summary = {"kind": "static", "method": method.name, "settings": method.settings(), "seed": int(cfg.seed),
               "corpus": instantiate(cfg.data.corpus).describe(), "vocabulary": len(vectors.key_to_index),
               "train_words": sum(counts.values()), "train_seconds": round(trained, 1),
               "layers": {"static": scores}, "wall_seconds": round(time.perf_counter() - started, 1)}
    out = Path(cfg.output_dir)
    save_vectors(out, vectors, datamodule.tokenizer_json, {k: v for k, v in summary.items() if k != "layers"})
    atomic_write_artefact(out / RESULT, summary)
    log.info("%s", headline(summary))
    return summary


def run_contextual(cfg: DictConfig) -> dict[str, Any]:
    started = time.perf_counter()
    source = open_source(cfg.checkpoint, trust_remote_code=bool(cfg.get("trust_remote_code", False)))
    splitter, sentences, counts = train_split_words(cfg, source.tokenizer.to_str())
    words = vocabulary(sentences, int(cfg.contextual.min_count))
    attention = Attention.named(source.reading.finetune_attention)
    layers = type_vectors(source.backbone, attention, source.tokenizer, sentences, words,
                          int(cfg.contextual.max_contexts), source.longest_input, int(cfg.contextual.batch_size),
                          special=source.special)
    seen = [i for i in range(len(words)) if not np.isnan(layers[0, i, 0])]  # NaN: no context fitted the window
    scores = {str(layer): score(keyed([words[i] for i in seen], vectors[seen]), splitter, counts,
                                int(cfg.benchmarks.rare_below))
              for layer, vectors in enumerate(layers)}
    summary = {"kind": "contextual", "checkpoint": source.origin, "objective": source.name, "source": source.kind,
               "attention": attention.kind, "seed": int(cfg.seed), "max_contexts": int(cfg.contextual.max_contexts),
               "vocabulary": len(seen), "train_words": sum(counts.values()), "layers": scores,
               "wall_seconds": round(time.perf_counter() - started, 1)}
    atomic_write_artefact(Path(cfg.output_dir) / RESULT, summary)
    log.info("%s", headline(summary))
    return summary


def headline(summary: dict[str, Any]) -> str:
    rows = [f"{layer:>8}: SimLex {fmt(s['simlex999']['spearman'])} WordSim {fmt(s['wordsim353']['spearman'])} "
            f"analogies {fmt(s['analogies']['overall']['accuracy'])} (coverage {s['simlex999']['coverage']:.2f}, "
            f"{s['wordsim353']['coverage']:.2f}, {s['analogies']['overall']['coverage']:.2f})"
            for layer, s in summary["layers"].items()]
    return "\n".join([f"{summary.get('method') or summary.get('objective')}, {summary['vocabulary']} words:", *rows])


def fmt(value: float | None) -> str:
    return "  n/a" if value is None else f"{value:.3f}"


EMBEDDINGS_RULES = (
    Rule("seed", (int,), at_least(0), "an integer >= 0"),
    Rule("benchmarks.rare_below", (int,), at_least(1), "an integer >= 1"),
    Rule("contextual.max_contexts", (int,), at_least(1), "an integer >= 1"),
    Rule("contextual.min_count", (int,), at_least(1), "an integer >= 1"),
    Rule("contextual.batch_size", (int,), at_least(1), "an integer >= 1"),
    Rule("trust_remote_code", (bool,), any_value, "true or false"),
)


def unapplied_settings(cfg: DictConfig) -> dict[str, str]:
    """The settings a run of `cfg` does not apply (common.unapplied): a checkpoint's type-level vectors train no static
    method and split words with its own tokenizer; static vectors read no contextual setting."""
    if cfg.checkpoint is None:
        return {"contextual": "without checkpoint= the run trains static vectors, which read no contextual setting"}
    return {"method": "checkpoint= reads a model's type-level vectors: no static method trains (method.min_count, "
                      "through contextual.min_count, picks the words)",
            "data.tokenizer": "checkpoint= splits words with the checkpoint's own tokenizer"}


def run_embeddings(cfg: DictConfig) -> dict[str, Any]:
    check_rules(cfg, EMBEDDINGS_RULES)
    return run_static(cfg) if cfg.checkpoint is None else run_contextual(cfg)


