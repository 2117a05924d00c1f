"""An armlm pretraining run or checkpoint as a ModelSource: its objective's class says how it reads."""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer

from common.vocabulary import CLS, EOD, MASK, PAD, SEP, SPECIAL_TOKENS, UNK
from datamodules.encoding import token_id
from sources.base import ModelSource, Reading, SpecialTokens
from training.pretrained import load_pretrained


def armlm_special_tokens(tokenizer: Tokenizer) -> SpecialTokens:
    """armlm's frame: `[CLS]` then the tokens, as every pretraining block begins (no [SEP] after a text)."""
    return SpecialTokens(start=token_id(tokenizer, CLS), end=(), mask=token_id(tokenizer, MASK),
                         pad=token_id(tokenizer, PAD), document_end=token_id(tokenizer, EOD),
                         specials=tuple(token_id(tokenizer, t) for t in SPECIAL_TOKENS),
                         unknown=token_id(tokenizer, UNK),
                         task_end=(token_id(tokenizer, SEP),), task_between=(token_id(tokenizer, SEP),),
                         second_type=1)


def open_armlm(path: str | Path, device: str | torch.device = "cpu") -> ModelSource:
    pretrained = load_pretrained(path)
    tokenizer = Tokenizer.from_str(pretrained.tokenizer_json)
    model = pretrained.backbone(device)
    return ModelSource(origin=str(pretrained.path), kind="armlm", backbone=model,
                       reading=Reading.of_objective(pretrained.objective_class), tokenizer=tokenizer,
                       special=armlm_special_tokens(tokenizer),
                       longest_input=int(pretrained.trained_length or model.config.max_len),
                       trained_length=pretrained.trained_length, details={"model": pretrained.model})
