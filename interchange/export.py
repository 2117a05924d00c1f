"""Write an armlm checkpoint as a folder Hugging Face transformers loads offline, and check it against armlm.

The folder holds safetensors weights, config.json, the tokenizer (`PreTrainedTokenizerFast`), a generation config
for causal LMs and a model card. `format`: "native" maps onto a transformers class (GPT2LMHeadModel, where
interchange.gpt2 says the checkpoint maps exactly), "remote" ships armlm's own modelling file
(`trust_remote_code=True`), "auto" takes native where it maps and remote otherwise. Before the folder appears, the
export is loaded back from disk the way a user would load it and its logits are held against armlm's on
`CHECK_SENTENCES`; above PARITY_TOLERANCE nothing is written.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer
from transformers import (
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    GenerationConfig,
    PreTrainedModel,
    PreTrainedTokenizerFast,
)

from armlm.common.babylm import milestone_name, milestone_words
from armlm.common.errors import ArmlmError
from armlm.common.provenance import armlm_commit
from armlm.common.vocabulary import CLS, EOD, MASK, PAD, SPECIAL_TOKENS
from armlm.datamodules.encoding import encode_pair, token_id
from armlm.generation.run import encode_prompt
from armlm.interchange import gpt2, modeling_armlm
from armlm.interchange.card import model_card
from armlm.interchange.parity import CHECK_SENTENCES, PARITY_TOLERANCE, ParityReport, armlm_outputs, compare
from armlm.interchange.preflight import FORMATS, check_config
from armlm.interchange.source import ExportSource, read_source, trained_positions
from armlm.interchange.tokenizer import exported_tokenizer, save_tokenizer

log = logging.getLogger("armlm.export")

MODELING_FILE = Path(modeling_armlm.__file__)
AUTO_CLASSES = {"ArmlmForCausalLM": AutoModelForCausalLM, "ArmlmForMaskedLM": AutoModelForMaskedLM,
                "ArmlmForSequenceClassification": AutoModelForSequenceClassification,
                "ArmlmForTokenClassification": AutoModelForTokenClassification, "ArmlmModel": AutoModel}


@dataclass
class ExportResult:
    out: Path
    target: str  # the transformers class the folder loads as
    native: bool  # True: no remote code
    parity: ParityReport
    ids_equal: bool  # the exported tokenizer gives armlm's ids on CHECK_SENTENCES
    not_native: list[str]  # why the native class was not used (empty when it was)
    fold_growth: float | None = None  # native GPT-2: how much the folded LM-head bias amplifies rounding (gpt2.py)


def export_checkpoint(checkpoint: str | Path, out: str | Path, *, format: str = "auto",
                      overwrite: bool = False) -> ExportResult:
    if format not in FORMATS:
        raise ArmlmError(f"format={format!r}; choose one of {FORMATS}")
    out = Path(out)
    source = trained_positions(read_source(checkpoint))
    refuse_unsafe_out(out, source.checkpoint, overwrite)
    tokenizer = Tokenizer.from_str(source.tokenizer_json)
    ids = {token: token_id(tokenizer, token) for token in SPECIAL_TOKENS}
    obstacles = gpt2.native_obstacles(source, math.inf if format == "native" else gpt2.AUTO_FOLD_GROWTH)
    if format == "native" and obstacles:
        raise ArmlmError(f"format=native: no transformers class expresses {source.checkpoint} exactly: "
                         f"{'; '.join(obstacles)}. Use format=remote (armlm's modelling file, loaded with "
                         "trust_remote_code=True) or format=auto")
    native = format != "remote" and not obstacles
    with staged(out, overwrite) as folder:
        target, parity, ids_equal = write_folder(source, folder, ids, native)
        if native and format == "auto" and not parity.ok():
            obstacles = [f"GPT-2's logits were {parity.max_abs_logit_diff:.1e} from armlm's (tolerance "
                         f"{PARITY_TOLERANCE:g})"]
            for entry in folder.iterdir():
                entry.unlink()
            native = False
            target, parity, ids_equal = write_folder(source, folder, ids, native)
        if not parity.ok() or not ids_equal:
            raise ArmlmError(f"the exported {target} does not reproduce armlm: max |delta logit| "
                             f"{parity.max_abs_logit_diff:.2e}, same token ids: {ids_equal}; nothing was written. "
                             "Please report it with the checkpoint's model config")
        growth = gpt2.fold_growth(source.weights, source.lm_bias) if native else None
        (folder / "README.md").write_text(model_card(source, target, native, parity, armlm_commit(), str(out), growth))
    return ExportResult(out, target, native, parity, ids_equal, obstacles, growth)


def write_folder(source: ExportSource, folder: Path, ids: dict[str, int],
                 native: bool) -> tuple[str, ParityReport, bool]:
    """Weights, config, tokenizer and generation config into `folder`, then the parity check on what was written."""
    model = gpt2.to_gpt2(source, ids[CLS], ids[EOD], ids[PAD]) if native else remote_model(source, ids)
    hf_tokenizer = exported_tokenizer(source.tokenizer_json, finetuned=source.finetuned,
                                      model_max_length=source.trained_length or source.model["max_len"],
                                      with_token_types=not source.is_causal_lm)
    if source.is_causal_lm:
        # Greedy by default, never proposing a special token but [EOD], where it stops: armlm's `armlm generate`.
        model.generation_config = GenerationConfig(
            bos_token_id=ids[CLS], eos_token_id=ids[EOD], pad_token_id=ids[PAD], use_cache=native,
            suppress_tokens=[i for token, i in ids.items() if token != EOD])
    model.save_pretrained(folder)
    save_tokenizer(hf_tokenizer, folder)
    if not native:
        shutil.copyfile(MODELING_FILE, folder / MODELING_FILE.name)
    return (type(model).__name__, *check_export(source, folder, native))


def refuse_unsafe_out(out: Path, checkpoint: Path, overwrite: bool) -> None:
    """`out` may be new or empty; with overwrite, an earlier export. Never the run folder the checkpoint is in."""
    resolved, ckpt = out.resolve(), checkpoint.resolve()
    if resolved == ckpt or resolved in ckpt.parents:
        raise ArmlmError(f"out={out} holds the checkpoint being exported; choose a folder outside its run")
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"out={out} is a file; choose a folder")
    if out.is_dir() and any(out.iterdir()):
        if not overwrite:
            raise FileExistsError(f"out={out} exists and is not empty; choose another folder or add overwrite=true")
        if not (out / "config.json").is_file():
            raise FileExistsError(f"out={out} is not an earlier export (it has no config.json), so overwrite=true "
                                  "will not replace it; choose another folder")


def remote_model(source: ExportSource, ids: dict[str, int]) -> PreTrainedModel:
    """armlm's modelling file's class for `source`, holding its weights under armlm's own names."""
    extra = {}
    if source.finetuned:
        settings, labels = source.settings, source.task["labels"]
        regression = source.task["kind"] == "regression"
        feature_layers = (min(int(settings["feature_layers"]), source.model["n_layers"])
                          if settings["mode"] == "features" and source.task["kind"] == "tagging" else 1)
        extra = {"pooling": settings["pooling"] or "first", "feature_layers": feature_layers,
                 "head_dropout": float(settings["head_dropout"]), "num_labels": 1 if regression else len(labels),
                 "problem_type": "regression" if regression else "single_label_classification"}
        if not regression:
            extra["id2label"] = dict(enumerate(labels))
            extra["label2id"] = {label: i for i, label in enumerate(labels)}
    config = modeling_armlm.ArmlmConfig(
        **source.model, attention=source.attention, lm_reader=source.lm_reader,
        start_token_id=ids[MASK] if source.lm_reader == "query_stream" else None,
        excluded_token_ids=[] if source.mask_in_support else [ids[MASK]],
        bos_token_id=ids[CLS], eos_token_id=ids[EOD], pad_token_id=ids[PAD], architectures=[source.architecture],
        auto_map={auto: f"{MODELING_FILE.stem}.{cls}" for auto, cls in modeling_armlm.AUTO_MAP.items()}, **extra,
    )
    model = getattr(modeling_armlm, source.architecture)(config)
    state = {f"armlm.{k}": v for k, v in source.weights.items()} | source.head
    if source.lm_bias is not None and not source.finetuned:
        state["lm_bias"] = source.lm_bias
    model.load_state_dict(state, strict=True)
    return model.eval()


def check_export(source: ExportSource, folder: Path, native: bool) -> tuple[ParityReport, bool]:
    """Load `folder` as a user would (offline, Auto classes) and compare it with armlm on CHECK_SENTENCES."""
    loaded_tokenizer = PreTrainedTokenizerFast.from_pretrained(folder, local_files_only=True)
    auto = AUTO_CLASSES["ArmlmForCausalLM" if native else source.architecture]
    model = auto.from_pretrained(folder, local_files_only=True, trust_remote_code=not native,
                                 dtype=torch.float32).eval()
    tokenizer = Tokenizer.from_str(source.tokenizer_json)
    # The sentences that fit the positions exported (all of them at armlm's vocabularies; a tiny one splits more).
    expected = {t: armlm_ids(tokenizer, source, t) for t in CHECK_SENTENCES}
    # A fine-tuned reader's ids are cut to its trained length; the folder's tokenizer does not cut, so a sentence
    # counts as fitting only where neither is longer than the positions exported.
    texts = [t for t, ids in expected.items()
             if max(len(ids), len(loaded_tokenizer(t)["input_ids"])) <= source.model["max_len"]]
    if not texts:
        raise ArmlmError(f"none of the parity sentences fits the {source.model['max_len']} positions the checkpoint "
                         "was trained on, so the export cannot be checked; export a checkpoint trained on longer blocks")
    batch = loaded_tokenizer(texts, padding=True, return_tensors="pt")
    ids_equal = all(loaded_tokenizer(text)["input_ids"] == expected[text] for text in texts)
    with torch.no_grad():
        theirs = model(**batch).logits
    armlm_batch = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"],
                   "token_type_ids": batch.get("token_type_ids", torch.zeros_like(batch["input_ids"]))}
    ours = armlm_outputs(source, armlm_batch)
    excluded = [] if source.finetuned else list(getattr(model.config, "excluded_token_ids", []) or [])
    return compare(ours, theirs, batch["attention_mask"], excluded), ids_equal


def armlm_ids(tokenizer: Tokenizer, source: ExportSource, text: str) -> list[int]:
    """The ids armlm feeds its model for `text`: generation's `[CLS] w..` to a language model, fine-tuning's
    `[CLS] w.. [SEP]` to a task model."""
    if source.finetuned:
        return encode_pair(tokenizer, text, None, 0, source.trained_length or source.model["max_len"]).input_ids
    return encode_prompt(tokenizer, text).tolist()


class staged:
    """A temporary sibling folder that replaces `out` only when everything in it was written and checked; on any
    error it is removed and `out` (an earlier export, with overwrite) is left as it was."""

    def __init__(self, out: Path, overwrite: bool) -> None:
        self.out, self.overwrite = out, overwrite
        self.tmp = out.parent / f".{out.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"

    def __enter__(self) -> Path:
        self.tmp.mkdir(parents=True)
        return self.tmp

    def __exit__(self, kind: type | None, *_: object) -> None:
        if kind is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            return
        old = self.out.parent / f".{self.out.name}.old-{uuid.uuid4().hex[:8]}"
        if self.out.exists():
            self.out.rename(old)
        try:
            self.tmp.rename(self.out)
        except OSError:
            if old.exists():
                old.rename(self.out)  # the earlier export stays where it was
            raise
        shutil.rmtree(old, ignore_errors=True)


def export_milestones(run: str | Path, out: str | Path, *, format: str = "auto",
                      overwrite: bool = False) -> list[ExportResult]:
    """Each word-milestone checkpoint of a pretraining run (save_at_words) as <out>/chck_<N>M, in word order; one
    line where the run saved none, or its objective has no BabyLM backend to read the exports."""
    folder = Path(run) / "checkpoints"
    named = [(milestone_words(p.name), p) for p in folder.glob("words-*.ckpt")] if folder.is_dir() else []
    found = sorted((words, p) for words, p in named if words is not None)  # Lightning's -v1 copies left out
    if not found:
        raise ArmlmError(f"{run} saved no word-milestone checkpoint (checkpoints/words-<W>.ckpt); train it with "
                         "save_at_words=[...] or save_at_words=babylm, and give its run folder as checkpoint=")
    backend = read_source(found[0][1]).babylm_backend
    if backend is None:
        raise ArmlmError(f"no backend of the BabyLM 2025 pipeline reads {read_source(found[0][1]).objective}'s "
                         "exports (causal: AR; mlm: MLM; mntp: GPT-BERT's hybrid); export it without milestones=true")
    return [export_checkpoint(path, Path(out) / milestone_name(words), format=format, overwrite=overwrite)
            for words, path in found]


def run_export(cfg: Any) -> ExportResult | list[ExportResult]:
    """`armlm export checkpoint=<ckpt or run folder> out=<folder> [format=auto|native|remote] [overwrite=true]`
    (`milestones=true`: every word-milestone checkpoint of a run, as <out>/chck_<N>M)."""
    check_config(cfg)
    if cfg.get("milestones"):
        results = export_milestones(cfg.checkpoint, cfg.out, format=str(cfg.format), overwrite=bool(cfg.overwrite))
        log.info("wrote %d milestone exports under %s: %s", len(results), cfg.out,
                 ", ".join(f"{r.out.name} ({r.target})" for r in results))
        return results
    result = export_checkpoint(cfg.checkpoint, cfg.out, format=str(cfg.format), overwrite=bool(cfg.overwrite))
    how = "native, no remote code" if result.native else "armlm's modelling file: trust_remote_code=True"
    log.info("wrote %s: %s (%s); max |delta logit| vs armlm %.2e over %d rows, same top prediction on %.0f%%, "
             "tokenizer ids equal: %s", result.out, result.target, how, result.parity.max_abs_logit_diff,
             result.parity.positions, 100 * result.parity.same_argmax, result.ids_equal)
    if result.not_native:
        log.info("not native because: %s", "; ".join(result.not_native))
    return result
