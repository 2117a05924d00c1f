"""`armlm zeroshot checkpoint=<run>`: a checkpoint's BLiMP accuracy by every scoring method its objective has.

Writes, in the run folder: zeroshot.json (every figure, per method), zeroshot.md (the table, the release's models
beside it over the same paradigms) and TensorBoard scalars whose tags are the same for every objective:
zeroshot/blimp_<method>/overall, .../field/<field>, .../phenomenon/<linguistics_term>.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig, ListConfig
from tokenizers import Tokenizer
from torch.utils.tensorboard import SummaryWriter

from armlm.common.atomic import atomic_write_artefact, atomic_write_text
from armlm.common.config import compose_config
from armlm.common.devices import check_device
from armlm.common.errors import ArmlmError, ArmlmFileError
from armlm.common.rules import Rule, any_value, at_least, check_rules
from armlm.common.units import likelihood_units, text_units
from armlm.sources import ModelSource, SpecialTokens, open_source
from armlm.sources.armlm import armlm_special_tokens
from armlm.zeroshot.blimp import (
    PUBLISHED_ALL_67,
    Paradigm,
    accuracy_table,
    pair_outcomes,
    pair_ties,
    published_beside,
    read_blimp,
    read_published,
)
from armlm.zeroshot.scoring import (
    EncodedSentence,
    SentenceScorer,
    after_context,
    encode_sentences,
    word_boundaries_known,
)

log = logging.getLogger("armlm.zeroshot")
IN_CONTEXT = "@context"  # a method's results with every sentence read after the fixed context block


def zeroshot_config(overrides: list[str]) -> DictConfig:
    """configs/zeroshot.yaml with overrides, for callers outside `armlm zeroshot` (studies, notebooks, bench)."""
    return compose_config("zeroshot", overrides)


def chosen_methods(cfg: DictConfig, scorer: SentenceScorer) -> list[str]:
    methods = list(scorer.methods) if cfg.methods is None else list(cfg.methods)
    if not methods:
        raise ArmlmError("methods=[]: nothing to score; give null for every method the checkpoint has")
    for method in methods:
        scorer.check_method(method)
    return methods


def encode_paradigms(tokenizer: Tokenizer, paradigms: Sequence[Paradigm],
                     special: SpecialTokens | None = None) -> dict[str, EncodedSentence]:
    """Every distinct sentence of the paradigms, encoded once in its model's frame (`special`: a source's; default an
    armlm tokenizer's), so a sentence shared by pairs is scored once."""
    texts = sorted({s for p in paradigms for s in (*p.good, *p.bad)})
    frame = armlm_special_tokens(tokenizer) if special is None else special
    return dict(zip(texts, encode_sentences(tokenizer, texts, frame), strict=True))


def open_scorer(cfg: DictConfig) -> tuple[ModelSource, SentenceScorer]:
    """The model `checkpoint=` names (sources.open_source) and its sentence scorer."""
    check_device(cfg.device)
    source = open_source(cfg.checkpoint, cfg.device, trust_remote_code=bool(cfg.get("trust_remote_code", False)))
    scorer = SentenceScorer(source.backbone, source.reading, source.special.mask,
                            tokens_per_pass=int(cfg.tokens_per_pass), bound_draws=int(cfg.bound.draws),
                            seed=int(cfg.seed), word_boundaries=word_boundaries_known(source.tokenizer))
    return source, scorer


def context_block(tokenizer: Tokenizer, file: str | None, tokens: int) -> tuple[int, ...]:
    """The first `tokens` tokens of `file`'s running text (blank lines and WikiText's `= heading =` lines left out),
    encoded by the checkpoint's tokenizer: one fixed held-out block every sentence of every pair can be read after,
    so a bidirectional reader sees a block's length of text, as in pretraining. () when no file is given."""
    if not file or tokens <= 0:
        return ()
    path = Path(file)
    if not path.is_file():
        raise ArmlmFileError(f"blimp.context.file={file} does not exist; point it at a text file or set it to null")
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    text = " ".join(line for line in lines if line and not line.startswith("="))
    ids = tokenizer.encode(text, add_special_tokens=False).ids[:tokens]
    if len(ids) < tokens:
        raise ArmlmError(f"blimp.context.file={file} holds {len(ids)} tokens, fewer than blimp.context.tokens={tokens}")
    return tuple(ids)


def within_length(paradigms: Sequence[Paradigm], encoded: Mapping[str, EncodedSentence], trained: int | None
                  ) -> tuple[list[Paradigm], int, list[str]]:
    """The paradigms without the pairs that have a sentence longer than the positions the model takes (an armlm
    checkpoint's trained ones: positions past them never learned anything); how many pairs that left out; and the paradigms it emptied,
    which leave the macro averages (both said in the report). Every arm of a study shares the tokenizer, so every
    arm leaves out the same pairs."""
    if trained is None:
        return list(paradigms), 0, []
    too_long = {t for t, e in encoded.items() if len(e.ids) > trained}
    kept, left_out, emptied = [], 0, []
    for p in paradigms:
        pairs = [(g, b) for g, b in zip(p.good, p.bad, strict=True) if g not in too_long and b not in too_long]
        left_out += len(p.good) - len(pairs)
        if pairs:
            kept.append(Paradigm(p.uid, p.field, p.term, tuple(g for g, _ in pairs), tuple(b for _, b in pairs)))
        else:
            emptied.append(p.uid)
    if not kept:
        raise ArmlmError(f"every BLiMP pair has a sentence longer than the {trained} positions the checkpoint was "
                         "trained on; pretrain with longer blocks or a larger vocabulary")
    if left_out:
        log.warning("%d of %d pairs left out (paradigms emptied: %s): a sentence is longer than the %d positions the "
                    "checkpoint was trained on", left_out, sum(len(p.good) for p in paradigms), emptied or "none",
                    trained)
    return kept, left_out, emptied


def markdown(results: Mapping[str, list[dict]], beside: Mapping[tuple[str, str], Mapping[str, float]],
             header: str) -> str:
    methods = list(results)
    models = sorted({m for v in beside.values() for m in v}, key=list(PUBLISHED_ALL_67).index)
    lines = [header, "", "| level | name | pairs | " + " | ".join(f"{m} [95 % CI]" for m in methods)
             + "".join(f" | {m}" for m in models) + " |", "|---" * (3 + len(methods) + len(models)) + "|"]
    for k, row in enumerate(results[methods[0]]):
        cells = [f"{results[m][k]['accuracy']:.3f} [{results[m][k]['ci_low']:.3f}, {results[m][k]['ci_high']:.3f}]"
                 + (f", {results[m][k]['ties']} ties" if "ties" in results[m][k] else "") for m in methods]
        release = beside.get((row["level"], row["name"]), {})
        cells += [f"{release[m]:.3f}" if m in release else "-" for m in models]
        lines.append(f"| {row['level']} | {row['name']} | {row['pairs']} | " + " | ".join(cells) + " |")
    lines += ["", "Accuracy is a macro average over paradigms, as the release reports it; the interval is a bootstrap "
              "over pairs. A tie (both sentences scored alike) counts as wrong here; BabyLM's 2025 pipeline and "
              "lm-evaluation-harness take the first of equal scores, the good sentence, and count it right, so they "
              "differ from these figures by the ties shown. The release's models are averaged over the same "
              "paradigms (raw_results/summary); over all "
              "67 they score " + ", ".join(f"{m} {v:.2f}" for m, v in PUBLISHED_ALL_67.items()) + " (humans from the "
              "paper)."]
    return "\n".join(lines) + "\n"


def pair_bits(by_paradigm: Mapping[str, np.ndarray]) -> dict[str, str]:
    """Per paradigm, one character a pair ("1": true), as zeroshot.json keeps pair_outcomes and pair_ties."""
    return {uid: "".join("1" if x else "0" for x in pairs) for uid, pairs in by_paradigm.items()}


def score_blimp(scorer: SentenceScorer, encoded: Mapping[str, EncodedSentence], paradigms: Sequence[Paradigm],
                methods: Sequence[str], resamples: int, seed: int) -> tuple[dict[str, list[dict]], dict[str, Any]]:
    texts = sorted({s for p in paradigms for s in (*p.good, *p.bad)})
    sentences = [encoded[t] for t in texts]
    results, timing, per_token, units, kept, kept_ties = {}, {}, {}, {}, {}, {}
    words, n_bytes = text_units(texts)
    for method in methods:
        started = time.perf_counter()
        scores = scorer.score(sentences, method)
        timing[method] = time.perf_counter() - started
        per_token[method] = float(scores.log_prob.sum() / scores.tokens.sum())
        if not np.isfinite(per_token[method]):
            raise ArmlmError(f"{method} scores are not finite ({per_token[method]}): the checkpoint's weights hold "
                             "NaN or inf; score another checkpoint")
        units[method] = likelihood_units(float(scores.log_prob.sum()), int(scores.tokens.sum()), words, n_bytes)
        scored = dict(zip(texts, scores.log_prob.tolist(), strict=True))
        outcomes, ties = pair_outcomes(paradigms, scored), pair_ties(paradigms, scored)
        results[method] = accuracy_table(paradigms, outcomes, resamples=resamples, seed=seed, ties=ties)
        # each pair's outcome ("1": the good sentence scored higher), for a bootstrap over pairs (analysis.findings.items),
        # and whether it tied ("1"), for rules that count a tie as right (bench/babylm_pipeline.py)
        kept[method], kept_ties[method] = pair_bits(outcomes), pair_bits(ties)
        log.info("BLiMP %s: %.3f over %d paradigms (%.0f s, %.0f sentences/s)", method, results[method][0]["accuracy"],
                 len(paradigms), timing[method], len(texts) / timing[method])
    info = {"sentences": len(texts), "tokens": int(sum(len(s.ids) - 1 - s.trailing for s in sentences)),
            "log_prob_per_token": per_token, "units": units, "seconds": timing,
            "sentences_per_second": {m: len(texts) / t for m, t in timing.items()}, "pair_outcomes": kept,
            "pair_ties": kept_ties}
    return results, info


def write_scalars(folder: Path, results: Mapping[str, list[dict]]) -> None:
    with SummaryWriter(str(folder / "tensorboard")) as writer:
        for method, rows in results.items():
            for row in rows:
                if row["level"] != "paradigm":
                    tag = "overall" if row["level"] == "overall" else f"{row['level']}/{row['name']}"
                    writer.add_scalar(f"zeroshot/blimp_{method}/{tag}", row["accuracy"], 0)


ZEROSHOT_RULES = (
    Rule("seed", (int,), at_least(0), "an integer >= 0"),
    Rule("blimp.max_pairs", (int,), any_value, "an integer >= 1, or null for all", optional=True),  # range: read_blimp
    Rule("blimp.context.tokens", (int,), at_least(1), "an integer >= 1"),
    Rule("bound.draws", (int,), at_least(2), "an integer >= 2 (the standard error needs two)"),
    Rule("bootstrap.resamples", (int,), at_least(1), "an integer >= 1"),
    Rule("tokens_per_pass", (int,), at_least(1), "an integer >= 1"),
    Rule("trust_remote_code", (bool,), any_value, "true or false"),
    # a name alone was read letter by letter, and refused as method='p'
    Rule("methods", (list, ListConfig), any_value, "a list, e.g. methods=[pll], or null for every method the checkpoint "
         "has", optional=True),
)


def unapplied_settings(cfg: DictConfig) -> dict[str, str]:
    """The settings a run of `cfg` does not apply (common.unapplied): the context block's length, without its file."""
    if not cfg.blimp.context.file:  # context_block reads no file for any empty value
        return {"blimp.context.tokens": "blimp.context.file is null, so no sentence is scored after a context block"}
    return {}


def run_zeroshot(cfg: DictConfig) -> dict[str, Any]:
    check_rules(cfg, ZEROSHOT_RULES)
    paradigms = read_blimp(cfg.blimp.dir, cfg.blimp.max_pairs)  # before the model: a bad folder or setting costs no load
    source, scorer = open_scorer(cfg)
    methods = chosen_methods(cfg, scorer)
    encoded = encode_paradigms(source.tokenizer, paradigms, source.special)
    block = context_block(source.tokenizer, cfg.blimp.context.file, int(cfg.blimp.context.tokens))
    in_context = {text: after_context(sentence, block) for text, sentence in encoded.items()}
    # Both readings score the same pairs: those that fit the positions after the block.
    paradigms, left_out, emptied = within_length(paradigms, in_context, source.longest_input)
    log.info("%s (%s): BLiMP, %d paradigms from %s, methods %s%s", source.origin, source.name,
             len(paradigms), cfg.blimp.dir, methods, f", also after a {len(block)}-token context" if block else "")
    results, info = score_blimp(scorer, encoded, paradigms, methods, int(cfg.bootstrap.resamples), int(cfg.seed))
    if block:
        more, more_info = score_blimp(scorer, in_context, paradigms, methods, int(cfg.bootstrap.resamples),
                                      int(cfg.seed))
        results |= {f"{method}{IN_CONTEXT}": rows for method, rows in more.items()}
        for key in ("log_prob_per_token", "units", "seconds", "sentences_per_second", "pair_outcomes", "pair_ties"):
            info[key] |= {f"{method}{IN_CONTEXT}": value for method, value in more_info[key].items()}
    beside = published_beside(paradigms, read_published(cfg.blimp.published))
    folder = Path(cfg.output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    report = {"checkpoint": source.summary(), "blimp": {"dir": str(cfg.blimp.dir), "paradigms": len(paradigms),
              "max_pairs": cfg.blimp.max_pairs, "pairs_left_out_too_long": left_out,
              "paradigms_left_out": emptied, **info, "results": results,
              "published": [{"level": k[0], "name": k[1], **v} for k, v in beside.items()]},
              "settings": {"methods": methods, "bound_draws": int(cfg.bound.draws), "seed": int(cfg.seed),
                           "context": {"file": cfg.blimp.context.file, "tokens": len(block)}}}
    header = f"# BLiMP: {source.name} ({source.origin})" + (
        f"\n\n{left_out} pairs left out, a sentence longer than the {source.longest_input} positions it takes "
        f"(paradigms left out: {', '.join(emptied) or 'none'})" if left_out else "")
    atomic_write_text(folder / "zeroshot.md", markdown(results, beside, header))
    write_scalars(folder, results)
    atomic_write_artefact(folder / "zeroshot.json", report)  # last: the stage's done file
    log.info("done: %s", folder / "zeroshot.md")
    return report
