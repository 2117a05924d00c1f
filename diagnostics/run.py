"""`armlm evaluate checkpoint=... data=... pairs=...`: the diagnostics of one checkpoint: independence
(pairwise joints, sequence scores) and, with representations.enabled, the per-layer representation ones.

Writes, in the run folder: diagnostics.json (every figure), diagnostics.md (the tables) and TensorBoard
scalars under tensorboard/ whose tags are the same for every checkpoint of a kind.
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from tokenizers import Tokenizer
from torch import Tensor
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

from armlm.common.atomic import atomic_write_artefact, atomic_write_text
from armlm.common.config import compose_config
from armlm.common.devices import check_device
from armlm.common.errors import ArmlmError, ArmlmFileError
from armlm.common.rules import NUMBER, Rule, above, any_value, at_least, check_rules
from armlm.common.units import likelihood_units, text_units
from armlm.diagnostics.discrepancy import representation_report
from armlm.diagnostics.likelihood import (
    blocks_fingerprint,
    held_out_blocks,
    train_unigram_counts,
    unigram_nll_without_eod,
)
from armlm.diagnostics.methods import ScoringMethod, scoring_method
from armlm.diagnostics.pairwise import PairwiseResult
from armlm.diagnostics.report import markdown_report, tensorboard_scalars
from armlm.diagnostics.scoring import Scorer, ordinary_tokens
from armlm.diagnostics.sentences import PAIR_KINDS, Pair, check_pair_count, sample_pairs, sentence_texts
from armlm.diagnostics.tables import Candidates
from armlm.models.attention import Attention
from armlm.sources import ModelSource, open_source
from armlm.sources.base import Backbone

log = logging.getLogger("armlm.diagnostics")
PAIR_CONTEXTS = ("sentence", "prefix")


def evaluate_config(overrides: list[str]) -> DictConfig:
    """configs/evaluate.yaml with overrides, for callers outside `armlm evaluate` (notebooks, bench)."""
    return compose_config("evaluate", overrides)


EVALUATE_RULES = (
    Rule("seed", (int,), at_least(0), "an integer >= 0"),
    Rule("pairs", (int,), any_value, "an integer >= 1"),  # its range: check_pair_count
    Rule("candidates", (int,), any_value, "an integer >= 2, or null for the exact mode", optional=True),
    Rule("batch_size", (int,), at_least(1), "an integer >= 1 (rows per forward pass)"),
    Rule("independence", (bool,), any_value, "true or false"),
    Rule("representations.enabled", (bool,), any_value, "true or false"),
    Rule("representations.sentences", (int,), at_least(2), "an integer >= 2"),
    Rule("likelihood.enabled", (bool,), any_value, "true or false"),
    Rule("likelihood.blocks", (int,), at_least(1), "an integer >= 1"),
    Rule("likelihood.block_size", (int,), any_value, "an integer, or null (the checkpoint's pretraining block size)",
         optional=True),  # its range: the checkpoint's positions, once it is read
    Rule("likelihood.strata", (int,), at_least(1), "an integer >= 1"),
    Rule("likelihood.draws", (int,), at_least(2), "an integer >= 2 (the standard error needs two)"),
    Rule("likelihood.max_draws", (int,), at_least(2), "an integer >= likelihood.draws"),
    Rule("likelihood.target_rel_stderr", NUMBER, above(0), "a number > 0"),
    Rule("sentences.min_tokens", (int,), at_least(2), "an integer >= 2"),
    Rule("sentences.max_tokens", (int,), at_least(2), "an integer >= sentences.min_tokens"),
    Rule("ag.tol", NUMBER, above(0), "a number > 0"),
    Rule("ag.max_iter", (int,), at_least(1), "an integer >= 1"),
    Rule("trust_remote_code", (bool,), any_value, "true or false"),
)


def check_settings(cfg: DictConfig) -> None:
    check_rules(cfg, EVALUATE_RULES)
    if not cfg.get("checkpoint"):
        raise ArmlmError("checkpoint= is missing; give a pretraining checkpoint file or run folder, a Hugging Face "
                         "model folder or hf:<hub id>")
    unknown = sorted(set(cfg.kinds) - set(PAIR_KINDS))
    if unknown or not cfg.kinds:
        raise ArmlmError(f"kinds={list(cfg.kinds)}; choose from {list(PAIR_KINDS)}")
    if not cfg.independence and not cfg.representations.enabled and not cfg.likelihood.enabled:
        raise ArmlmError("independence=false, representations.enabled=false and likelihood.enabled=false: "
                         "nothing to measure")
    if cfg.independence:
        check_pair_count(int(cfg.pairs))
    if cfg.candidates is not None and int(cfg.candidates) < 2:
        raise ArmlmError(f"candidates={cfg.candidates}; use at least 2, or null for the exact mode")
    if cfg.pair_context not in PAIR_CONTEXTS:
        raise ArmlmError(f"pair_context={cfg.pair_context!r}; choose one of {PAIR_CONTEXTS}")
    # Settings that only hold together, checked here whatever the checkpoint: each was refused only by the measure
    # that reads it, after the pairwise scoring had run (minutes), and not at all for a checkpoint without that measure
    likelihood, sentences = cfg.likelihood, cfg.sentences
    if likelihood.max_draws < likelihood.draws:
        raise ArmlmError(f"likelihood.max_draws={likelihood.max_draws} is below likelihood.draws={likelihood.draws}; "
                         "give max_draws >= draws (the bound doubles its draws up to max_draws)")
    if sentences.max_tokens < sentences.min_tokens:
        raise ArmlmError(f"sentences.max_tokens={sentences.max_tokens} is below sentences.min_tokens="
                         f"{sentences.min_tokens}; give max_tokens >= min_tokens")
    rates = cfg.representations.mask_rates
    if not OmegaConf.is_list(rates) or any(isinstance(k, bool) or not isinstance(k, (int, float)) or not 0 < k < 1
                                           for k in rates):
        raise ArmlmError(f"representations.mask_rates={rates}; give a list of rates in (0, 1), e.g. [0.15,0.4]")


# Passes per pair above which an exact joint inside whole sentences is refused (AR's V^2: days at V = 8192).
MAX_EXACT_PASSES = 100_000


def exact_passes(method: ScoringMethod, pair_context: str, vocab_size: int) -> int:
    """Forward passes per pair of an exact joint (every ordinary token a candidate) in this pair context."""
    passes = method.exact_sentence_passes if pair_context == "sentence" else method.exact_prefix_passes
    return passes(vocab_size)


def check_affordable(cfg: DictConfig, method: ScoringMethod, vocab_size: int) -> None:
    """An exact pair joint can cost V^2 passes (the chain rule inside a whole sentence needs one per (a, b)
    for the tokens after j): refuse what would take days, and say what is affordable."""
    if not cfg.independence or cfg.candidates is not None:
        return
    passes, prefix = exact_passes(method, cfg.pair_context, vocab_size), exact_passes(method, "prefix", vocab_size)
    if passes > MAX_EXACT_PASSES:
        cheaper = (f"pair_context=prefix ({prefix:,} passes per pair, exact) or "
                   if cfg.pair_context == "sentence" and prefix <= MAX_EXACT_PASSES else "")
        raise ArmlmError(f"candidates=null with pair_context={cfg.pair_context}: a {method.name} exact joint at "
                         f"V = {vocab_size:,} needs {passes:,} forward passes per pair; use {cheaper}candidates=K "
                         "(restricted, not comparable across checkpoints)")


def sequence_scores(scorer: Scorer, sentences: list[list[int]], method: ScoringMethod, mask_id: int | None,
                    texts: list[str] | None = None) -> dict[str, Any]:
    """Chain rule: exact log-likelihood and perplexity. Conditionals: pseudo-log-likelihood and pseudo-perplexity.
    With the sentences' `texts`, the sum per token, per word and per byte too (`units`: common.units)."""
    total, tokens = 0.0, 0
    for ids in tqdm(sentences, desc="sequence scores", unit="sentence"):
        scores = method.sequence(scorer, ids, mask_id)
        total += scores.sum().item()
        tokens += len(scores)
    result = {"sentences": len(sentences), "tokens": tokens, method.sequence_name: total,
              method.perplexity_name: math.exp(-total / tokens), "perplexity_kind": method.perplexity_name}
    if texts is not None:
        result["units"] = {"kind": method.sequence_name, **likelihood_units(total, tokens, *text_units(texts))}
    return result


@dataclass
class Setup:
    """Everything a diagnostic needs, built once from the evaluate config."""

    model: Backbone
    source: ModelSource
    method: ScoringMethod  # how the model is scored (its source's reading says)
    corpus: Any
    sentences: list[list[int]]
    texts: list[str]  # each sentence's text, for the likelihood per word and per byte
    scorer: Scorer
    mask_id: int | None  # None: the tokenizer has no mask token (a decoder's): the [MASK] shift is not measured
    ordinary: Tensor
    candidates: int | None
    tokenizer: Tokenizer

    @property
    def attention(self) -> Attention:
        """How the backbone attends when diagnosed: as its source says it does when fine-tuned."""
        return Attention.named(self.source.reading.finetune_attention)


def setup(cfg: DictConfig) -> Setup:
    check_settings(cfg)
    check_device(cfg.device)
    source = open_source(cfg.checkpoint, cfg.device, trust_remote_code=bool(cfg.get("trust_remote_code", False)))
    model, tokenizer, special = source.backbone, source.tokenizer, source.special
    if cfg.likelihood.enabled:
        likelihood_blocks(source, cfg)
    corpus = instantiate(cfg.data.corpus)
    method = scoring_method(source.reading)
    check_affordable(cfg, method, source.vocab_size)
    found = sentence_texts(corpus, tokenizer, min_tokens=cfg.sentences.min_tokens,
                           max_tokens=min(int(cfg.sentences.max_tokens), source.longest_input - 1), split=cfg.split,
                           start=special.start, specials=special.specials)
    mask_id = special.mask
    if method.name == "conditionals":
        special.require_mask(source.origin, "the masked-conditional diagnostics")
    next_states = partial(source.reading.next_token_states, model, mask_id=mask_id)
    # ids past the tokenizer's own (a vocabulary padded for speed) are no token at all
    ordinary = ordinary_tokens(source.vocab_size, list(special.specials))
    ordinary[tokenizer.get_vocab_size():] = False
    return Setup(model, source, method, corpus, [ids for _, ids in found], [text for text, _ in found],
                 Scorer(model, batch_size=cfg.batch_size, next_states=next_states,
                        excluded=None if source.reading.mask_in_support else mask_id), mask_id, ordinary,
                 None if cfg.candidates is None else int(cfg.candidates), tokenizer)


def pair_contexts(sentences: list[list[int]], pairs: list[Pair], context: str) -> list[list[int]]:
    """The text each pair is scored in: its whole sentence, or (`prefix`) the sentence cut after the pair's
    second token, so nothing follows j. In the prefix context the AR model's exact joint needs no
    sentence per (a, b) for the tokens after j: V passes per pair instead of V^2, which makes the exact
    mode (every candidate) affordable for AR as for MLM on a small vocabulary."""
    if context == "sentence":
        return sentences
    cut = list(sentences)
    for pair in pairs:  # one pair per sentence and kind (sample_pairs draws sentences without replacement)
        cut[pair.sentence] = sentences[pair.sentence][: pair.j + 1]
    return cut


def pairwise(s: Setup, pairs: list[Pair], k: int | None, cfg: DictConfig,
             given: list[Candidates] | None = None) -> PairwiseResult:
    """The checkpoint's diagnostics over one kind of pairs, with k candidates per position (or `given` ones)."""
    sentences = pair_contexts(s.sentences, pairs, cfg.pair_context)
    with torch.inference_mode():
        return s.method.pairwise(s.scorer, sentences, pairs, s.mask_id, s.ordinary, k, cfg, given)


def candidates_from(path: str, kind: str, pairs: list[Pair]) -> list[Candidates]:
    """Another report's candidates for the same pairs, so two checkpoints are scored on the same K x K
    sets. Candidates chosen by a model favour that model's view of the sentence (an AR's come from the
    left context only), so P-PPLs of different checkpoints are only comparable on shared sets."""
    report_path = Path(path)
    if not report_path.is_file():
        raise ArmlmFileError(f"candidates_from={path} does not exist; give the diagnostics.json of a "
                                "finished `armlm evaluate` run")
    part = json.loads(report_path.read_text()).get("pairwise", {}).get(kind)
    if part is None or "cand_i" not in part.get("per_pair", {}):
        raise ArmlmError(f"candidates_from={path} has no per-pair candidates for {kind} pairs; rerun it with "
                         "this version of `armlm evaluate` and the same kinds")
    theirs = [tuple(p) for p in part["per_pair"]["pair"]]
    ours = [(p.sentence, p.i, p.j) for p in pairs]
    if theirs != ours:
        raise ArmlmError(f"candidates_from={path}: its {kind} pairs differ from this run's; use the same "
                         "data, split, seed, pairs and sentences settings, and checkpoints with one tokenizer")
    return [(torch.tensor(a), torch.tensor(b)) for a, b in zip(part["per_pair"]["cand_i"], part["per_pair"]["cand_j"])]


def independence(s: Setup, cfg: DictConfig) -> dict[str, Any]:
    """The pairwise diagnostics of every pair kind, and the sequence score of the sentences they use."""
    results: dict[str, PairwiseResult] = {}
    used: set[int] = set()
    for kind in cfg.kinds:
        pairs = sample_pairs(s.sentences, int(cfg.pairs), kind, seed=int(cfg.seed))
        used.update(p.sentence for p in pairs)
        given = candidates_from(cfg.candidates_from, kind, pairs) if cfg.candidates_from else None
        results[kind] = pairwise(s, pairs, s.candidates, cfg, given)
        log.info("%s pairs: %.1f s, %d forward passes", kind, results[kind].seconds, results[kind].passes)
    sequence_started = time.perf_counter()
    with torch.inference_mode():
        sequence = sequence_scores(s.scorer, [s.sentences[i] for i in sorted(used)], s.method, s.mask_id,
                                   [s.texts[i] for i in sorted(used)])
    sequence["seconds"] = round(time.perf_counter() - sequence_started, 2)
    return {"sequence": sequence,
            "pairwise": {kind: r.summary(s.method.headline_joint) for kind, r in results.items()}}


def likelihood_blocks(source: ModelSource, cfg: DictConfig) -> tuple[int, int]:
    """The held-out blocks' length and the token that ends a document in them, or a line naming the fix: checked when
    the source is opened (setup), not after the pairwise scoring (minutes)."""
    block_size = cfg.likelihood.block_size or source.trained_length
    if block_size is None:
        raise ArmlmError(f"{source.origin} does not record its pretraining block size; give likelihood.block_size "
                         f"(2..{source.longest_input}, the positions it takes)")
    if not 2 <= int(block_size) <= source.longest_input:
        raise ArmlmError(f"likelihood.block_size={block_size}; use 2..{source.longest_input} (the positions "
                         f"{source.origin} takes)")
    if source.special.document_end is None:
        raise ArmlmError(f"{source.origin}'s tokenizer has no token that ends a document (EOS, [SEP] or [EOD]) to "
                         "pack held-out blocks with; set likelihood.enabled=false")
    return int(block_size), source.special.document_end


def likelihood(s: Setup, cfg: DictConfig) -> dict[str, Any]:
    """The checkpoint's NLL per target token on held-out blocks, exact or bounded as its scoring method says,
    and the train split's unigram NLL of the same non-[EOD] targets (below_unigram: unigram minus model)."""
    started = time.perf_counter()
    source, special = s.source, s.source.special
    block_size, eod_id = likelihood_blocks(source, cfg)
    blocks = held_out_blocks(s.corpus, s.tokenizer, block_size=int(block_size), count=int(cfg.likelihood.blocks),
                             split=cfg.split, start=special.start, document_end=eod_id)
    # The train split's unigram on the same non-[EOD] targets: "nats below unigram" is a learning scale shared
    # by every objective (AR exact, a bidirectional model's bound).
    excluded = [t for t in special.specials if t != special.unknown]  # [UNK] is a target every model is scored on
    unigram = unigram_nll_without_eod(blocks, train_unigram_counts(s.corpus, s.tokenizer, eod_id), excluded, eod_id)
    with torch.inference_mode():
        result = s.method.likelihood(s.scorer, blocks, s.mask_id, eod_id, cfg)
    # Reports compare only on the same blocks: the fingerprint says whether two did (corpus, tokenizer, size).
    return {**result.summary(), "unigram_nll_per_token_without_eod": unigram,
            "below_unigram": unigram - result.nll_per_token_without_eod, "block_size": int(block_size),
            "blocks_fingerprint": blocks_fingerprint(blocks), "seconds": round(time.perf_counter() - started, 2)}


def run_diagnostics(cfg: DictConfig) -> dict[str, Any]:
    started = time.perf_counter()
    out = Path(cfg.output_dir)
    s = setup(cfg)
    source, corpus, k = s.source, s.corpus, s.candidates
    log.info("%s checkpoint %s (%s): %d qualifying sentences, %d pairs per kind, candidates %s", s.method.name,
             source.origin, source.name, len(s.sentences), cfg.pairs, k or "all (exact)")

    report: dict[str, Any] = {
        "checkpoint": source.origin, "objective": source.name, "scoring": s.method.name, "source": source.kind,
        "vocab_size": source.vocab_size, "candidates": k, "candidates_from": cfg.candidates_from,
        "pair_context": cfg.pair_context,
        # Exact tables (every ordinary token a candidate) are the checkpoint's own figures; restricted ones
        # depend on the candidate sets and flatter the gold pair, so they do not compare across checkpoints.
        "comparable_across_checkpoints": k is None,
        "pairs_per_kind": int(cfg.pairs), "seed": int(cfg.seed), "corpus": corpus.describe(), "split": cfg.split,
        "settings": OmegaConf.to_container(cfg, resolve=True),
        # how well the checkpoint learned its own objective (its run's summary): a study's learning gate reads it
        # here where the pretraining run lives in another study's folder (study=embeddings)
        "pretraining": source.own_margins(),
    }
    if cfg.independence:
        report.update(independence(s, cfg))
    if cfg.likelihood.enabled:
        report["likelihood"] = likelihood(s, cfg)
    if cfg.representations.enabled:
        report["representations"] = representation_report(s.model, s.sentences, s.attention, s.mask_id, cfg,
                                                           s.ordinary)
    report["wall_seconds"] = round(time.perf_counter() - started, 1)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_artefact(out / "diagnostics.json", report)
    atomic_write_text(out / "diagnostics.md", markdown_report(report))
    with SummaryWriter(str(out / "tensorboard")) as writer:
        for tag, value, step in tensorboard_scalars(report):
            writer.add_scalar(tag, value, step)
    log.info("written %s and diagnostics.md (%.0f s)\n%s", out / "diagnostics.json", report["wall_seconds"],
             markdown_report(report))
    return report
