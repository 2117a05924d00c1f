"""Continued pretraining: `python train.py objective=mlm init_from=<checkpoint or run folder>` starts from another
run's backbone with a fresh optimiser, schedule and objective (no optimiser state is carried: the new run's
learning-rate schedule warms up again, as a second stage of Gisserot-Boukhlef et al. 2025 does). The new run's
budget counts its own tokens only; its lineage (every ancestor's checkpoint, objective and tokens) is kept in its
hyperparameters, so checkpoints, summaries and TensorBoard carry the chain and a report can sum the budgets."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from armlm.common.errors import ArmlmError
from armlm.models.backbone import ModelConfig, Transformer
from armlm.models.checkpoint import backbone_weights, hyperparameters, load_weights, read_checkpoint, resolve_checkpoint
from armlm.training.callbacks import TokenAccounting
from armlm.training.setup import differences


@dataclass(frozen=True)
class Ancestor:
    checkpoint: str
    objective: str  # the parent's objective `_target_`
    tokens: int  # input tokens that run trained on (its own budget, not its ancestors')


def lineage_tokens(lineage: list[dict[str, Any]]) -> int:
    """Input tokens of every ancestor together: add a run's own tokens_seen for the chain's total."""
    return sum(int(a["tokens"]) for a in lineage)


def parent_lineage(path: str | Path, model: ModelConfig, tokenizer_json: str) -> tuple[list[dict[str, Any]], Path]:
    """The chain behind `path` (oldest first, the parent last) and its checkpoint file. Refused, naming the key:
    another model config, another vocabulary, or a checkpoint that is not armlm pretraining."""
    ckpt_path = resolve_checkpoint(path)
    ckpt = read_checkpoint(ckpt_path)
    hparams = hyperparameters(ckpt)
    if not isinstance(hparams, dict) or not {"model", "objective"} <= hparams.keys() or "task" in hparams:
        raise ArmlmError(f"init_from={path}: {ckpt_path} is not an armlm pretraining checkpoint; give the checkpoint "
                         "or run folder of a `python train.py objective=...` run")
    # the vocabulary size is the tokenizer's, compared with the tokenizer below; dropout and the initial weights'
    # scale do not describe the weights being carried over, so a continued run may set them as it likes
    free = ("vocab_size", "dropout", "init_std")
    ours = {k: v for k, v in asdict(model).items() if k not in free}
    theirs = {k: v for k, v in hparams["model"].items() if k not in free}
    differing = differences({"model": ours}, {"model": theirs})
    if differing:
        raise ArmlmError(f"init_from={path}: the parent's model differs ({', '.join(differing)}); continue with "
                         "the parent's model settings (model=..., model.*=...)")
    parent_tokenizer = ckpt.get("tokenizer_json")
    if parent_tokenizer != tokenizer_json:
        raise ArmlmError(f"init_from={path}: {vocabulary_difference(parent_tokenizer, tokenizer_json)}; continue "
                         "on data with the parent's tokenizer (its data.* and data.tokenizer.* settings)")
    tokens = TokenAccounting.saved_tokens(ckpt)
    if tokens is None:
        raise ArmlmError(f"init_from={path}: {ckpt_path} records no tokens seen (callbacks.TokenAccounting); it was "
                         "not written by armlm pretraining")
    parent = Ancestor(str(ckpt_path.resolve()), str(hparams["objective"].get("_target_")), tokens)
    return [*(hparams.get("init_from") or []), asdict(parent)], ckpt_path


def vocabulary_difference(parent: str | None, ours: str) -> str:
    """What differs between two tokenizer.json strings, in words (the first key that differs in its vocabulary)."""
    if parent is None:
        return "the parent checkpoint carries no tokenizer (tokenizer_json)"
    theirs_vocab = json.loads(parent).get("model", {}).get("vocab", {})
    ours_vocab = json.loads(ours).get("model", {}).get("vocab", {})
    if len(theirs_vocab) != len(ours_vocab):
        return f"vocabulary size: parent {len(theirs_vocab)} vs run {len(ours_vocab)} (data.tokenizer.vocab_size)"
    changed = sorted(token for token in theirs_vocab.keys() | ours_vocab.keys()
                     if theirs_vocab.get(token) != ours_vocab.get(token))
    if changed:
        return f"vocabulary: {len(changed)} token ids differ (first {changed[0]!r}: parent " \
               f"{theirs_vocab.get(changed[0])} vs run {ours_vocab.get(changed[0])})"
    return "tokenizer: same vocabulary but another normaliser, pre-tokenizer or post-processor"


def load_parent_backbone(model: Transformer, ckpt_path: Path) -> None:
    """The parent's backbone weights (the tied LM head with them); objective heads are not carried over."""
    load_weights(model, backbone_weights(read_checkpoint(ckpt_path)), ckpt_path)
