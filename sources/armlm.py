"""An armlm pretraining run or checkpoint as a ModelSource: its objective's class says how it reads."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer

from armlm.common.atomic import read_artefact
from armlm.common.errors import ArmlmError
from armlm.common.vocabulary import CLS, EOD, MASK, PAD, SEP, SPECIAL_TOKENS, UNK
from armlm.datamodules.encoding import token_id
from armlm.models.backbone import ModelConfig
from armlm.sources.base import Backbone, ModelSource, Reading, SpecialTokens
from armlm.training.pretrained import load_pretrained


def armlm_special_tokens(tokenizer: Tokenizer) -> SpecialTokens:
    """armlm's frame: `[CLS]` then the tokens, as every pretraining block begins (no [SEP] after a text)."""
    return SpecialTokens(start=token_id(tokenizer, CLS), end=(), mask=token_id(tokenizer, MASK),
                         pad=token_id(tokenizer, PAD), document_end=token_id(tokenizer, EOD),
                         specials=tuple(token_id(tokenizer, t) for t in SPECIAL_TOKENS),
                         unknown=token_id(tokenizer, UNK),
                         task_end=(token_id(tokenizer, SEP),), task_between=(token_id(tokenizer, SEP),),
                         second_type=1)


@dataclass
class ArmlmSource(ModelSource):
    """An armlm run or checkpoint: it records the positions it trained, its embedding has one row per token, its
    backbone trains on at the fine-tuning dropout, and its run's summary says how well it learned."""

    @property
    def trained_positions(self) -> int | None:
        return self.trained_length

    def check_vocabulary(self, tokenizer_size: int) -> None:
        if tokenizer_size != self.vocab_size:
            raise ArmlmError(f"{self.origin}: its tokenizer has {tokenizer_size} tokens but its model.vocab_size is "
                             f"{self.vocab_size}; the checkpoint is inconsistent, re-save it from its run")

    def finetune_backbone(self, dropout: float) -> Backbone:
        return self.backbone.set_dropout(dropout)

    def finetune_model(self, dropout: float, trust_remote_code: bool) -> dict[str, Any]:
        return asdict(ModelConfig(**{**self.details["model"], "dropout": float(dropout)}))

    def own_margins(self) -> dict[str, Any] | None:
        """The own-loss margins (train.py's own_below_unigram) in the summary.json of the run that wrote the
        checkpoint (<run>/checkpoints/<file>), approximate for a summary rewritten from before they were logged;
        None for a checkpoint outside its run."""
        summary = Path(self.origin).parent.parent / "summary.json"
        if not summary.is_file():
            return None
        read = read_artefact(summary)
        return {"own_below_unigram": read["own_below_unigram"],
                "approximate": read.get("own_below_unigram_approximate", False)}


def open_armlm(path: str | Path, device: str | torch.device = "cpu") -> ModelSource:
    pretrained = load_pretrained(path)
    tokenizer = Tokenizer.from_str(pretrained.tokenizer_json)
    model = pretrained.backbone(device)
    return ArmlmSource(origin=str(pretrained.path), kind="armlm", backbone=model,
                       reading=Reading.of_objective(pretrained.objective_class), tokenizer=tokenizer,
                       special=armlm_special_tokens(tokenizer),
                       longest_input=int(pretrained.trained_length or model.config.max_len),
                       trained_length=pretrained.trained_length, details={"model": pretrained.model})
