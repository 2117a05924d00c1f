"""What every instrument asks of a model, whoever trained it: a `ModelSource`.

An armlm checkpoint answers through its objective's class; a Hugging Face model through what transformers' Auto
classes and its tokenizer say of it (sources.huggingface). The instruments (diagnostics, zero-shot scoring, the
lm-eval model type, type-level vectors) read only this: a backbone with the interface of `models.backbone.Transformer`
(`forward`, `layer_states`, `logits`, `config`), how it reads (`Reading`), its tokenizer and special tokens, and the
longest input it takes. Nothing downstream switches on a model's name or class.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from tokenizers import Tokenizer
from torch import Tensor

from armlm.common.errors import ArmlmError
from armlm.datamodules.encoding import TaskFrame
from armlm.models.attention import CAUSAL, Attention
from armlm.objectives.base import NOT_A_LANGUAGE_MODEL, Objective


class Backbone(Protocol):
    """The part of `models.backbone.Transformer` the instruments call (sources.huggingface wraps a transformers
    model in it)."""

    config: Any  # vocab_size, max_len, n_layers, d_model

    def __call__(self, input_ids: Tensor, *, attention: Attention, attention_mask: Tensor | None = None,
                 token_type_ids: Tensor | None = None, output_mask: Tensor | None = None) -> Tensor: ...

    def layer_states(self, input_ids: Tensor, *, attention: Attention, attention_mask: Tensor | None = None,
                     token_type_ids: Tensor | None = None, with_embeddings: bool = False) -> list[Tensor]: ...

    def logits(self, hidden: Tensor) -> Tensor: ...


def causal_next_token_states(model: Backbone, input_ids: Tensor, mask_id: int | None = None) -> Tensor:
    """Row t's state predicts token t + 1: the backbone under causal attention."""
    return model(input_ids, attention=CAUSAL)


@dataclass(frozen=True)
class Reading:
    """How a model may be read: the declarations an armlm objective makes (objectives.base.Objective), for any
    source. `attentions`: the attention kinds its backbone can run under (an armlm backbone takes any; a
    transformers model its own, and the other static kind where it obeys a 4D mask: sources.hf_backbone)."""

    name: str  # the objective's class, or the transformers class, for reports and messages
    scoring: str  # "chain_rule", "conditionals" or "none" (diagnostics.methods)
    masked_conditionals: bool  # trained to predict [MASK]ed tokens from both sides: PLL and the bound read it
    finetune_attention: str  # how it attends downstream: "causal" or "bidirectional"
    attentions: tuple[str, ...] = ("causal", "bidirectional")
    mask_in_support: bool = True
    masked_prediction_offset: int = 0
    left_to_right_reader: str = "causal"
    reference: str = ""
    next_token_states: Callable[..., Tensor] = field(default=causal_next_token_states, compare=False)

    @classmethod
    def of_objective(cls, objective: type[Objective]) -> Reading:
        """An armlm objective's own declarations (its class attributes, never its name)."""
        return cls(objective.__name__, objective.scoring, objective.masked_conditionals, objective.finetune_attention,
                   mask_in_support=objective.mask_in_support,
                   masked_prediction_offset=objective.masked_prediction_offset,
                   left_to_right_reader=objective.left_to_right_reader, reference=objective.reference,
                   next_token_states=objective.next_token_states)

    @property
    def is_language_model(self) -> bool:
        return self.scoring != NOT_A_LANGUAGE_MODEL

    def refuse_unless_language_model(self, what: str) -> None:
        if not self.is_language_model:
            reason = self.reference or "no token distribution"
            raise ArmlmError(f"{self.name} is not a language model (scoring='none': {reason}), so {what} cannot "
                             "read it; fine-tune it (armlm finetune pretrained=...), or use a language model")

    def refuse_attention(self, kind: str, what: str) -> None:
        """One line when `what` needs an attention kind this backbone cannot run under."""
        if kind not in self.attentions:
            raise ArmlmError(f"{what} needs {kind} attention, but {self.name} only attends {' or '.join(self.attentions)} "
                             "(its transformers class fixes its mask); use a setting with that attention, or a model "
                             "that can switch it")


def as_reading(reading: Reading | type[Objective]) -> Reading:
    """A Reading, or an armlm objective class read as one (what callers inside armlm often hold)."""
    return reading if isinstance(reading, Reading) else Reading.of_objective(reading)


@dataclass(frozen=True)
class SpecialTokens:
    """The ids a source's texts are framed with, by role (an armlm tokenizer's [CLS], [SEP], [MASK], [PAD], [EOD];
    BERT's own; GPT-2's <|endoftext|> as start and document end)."""

    start: int  # what every scored text begins with: [CLS], <s>, a decoder's BOS (never scored)
    end: tuple[int, ...]  # what the model's own template puts after a text: BERT's [SEP]; nothing for armlm or GPT-2
    mask: int | None  # None: the tokenizer has no mask token, so no masked reading exists
    pad: int | None
    document_end: int | None  # between documents of a held-out stream: armlm's [EOD], a decoder's EOS, BERT's [SEP]
    specials: tuple[int, ...]  # every special id: never a target, a candidate or a masked position
    unknown: int | None = None  # [UNK]: special, yet a target every model is scored on
    # what ends a text a task reads (fine-tuning, type-level vectors): armlm's [SEP] (its `[CLS] A [SEP]`); a
    # transformers model's own template end
    task_end: tuple[int, ...] = ()
    task_between: tuple[int, ...] = ()  # between the two texts of a task's pair: armlm's [SEP], RoBERTa's </s></s>
    second_type: int = 0  # the second text's segment id (BERT's 1; 0 where the model has one segment row)
    word_prefix: str = ""  # what a word encoded on its own is prefixed with (a byte-level BPE's space)

    def task_frame(self) -> TaskFrame:
        """Where fine-tuning lays out a task's texts (datamodules.encoding)."""
        pad = self.pad if self.pad is not None else (self.document_end if self.document_end is not None else 0)
        return TaskFrame(self.start, self.task_between, self.task_end, self.second_type, pad, self.word_prefix)

    def require_mask(self, origin: str, what: str) -> int:
        if self.mask is None:
            raise ArmlmError(f"{origin}'s tokenizer has no mask token, so {what} cannot mask a position; score it "
                             "by the chain rule (method=exact) or use a masked LM")
        return self.mask


SOURCE_KEY = "source"  # in a fine-tuning checkpoint's `model` hyperparameters: a transformers model's origin


@dataclass
class ModelSource:
    """A model opened for the instruments (sources.open_source)."""

    origin: str  # the run folder, checkpoint, Hugging Face folder or hf:<id>[@revision]
    kind: str  # "armlm" or "huggingface"
    backbone: Backbone
    reading: Reading
    tokenizer: Tokenizer  # a `tokenizers` tokenizer; encode with add_special_tokens=False and frame with `special`
    special: SpecialTokens
    longest_input: int  # positions it takes: armlm's trained block size, else the model's positions
    # armlm's trained block size (None for a source that does not record one): positions past it never learned
    trained_length: int | None = None
    details: dict[str, Any] = field(default_factory=dict)  # what the summary adds (model config, revision, ...)

    @property
    def name(self) -> str:
        return self.reading.name

    @property
    def vocab_size(self) -> int:
        return int(self.backbone.config.vocab_size)

    # What fine-tuning and diagnostics ask of a source. These are a transformers model's answers; an armlm run answers
    # for itself (sources.armlm.ArmlmSource), so nothing downstream switches on `kind`.
    @property
    def trained_positions(self) -> int | None:
        """The positions pretraining trained, to which fine-tuning cuts its inputs (None: not recorded)."""
        return self.longest_input

    def check_vocabulary(self, tokenizer_size: int) -> None:
        """A transformers embedding may be padded past its tokenizer: only more ids than rows is inconsistent."""
        if tokenizer_size > self.vocab_size:
            raise ArmlmError(f"{self.origin}: its tokenizer has {tokenizer_size} tokens but its model.vocab_size is "
                             f"{self.vocab_size}; the model is inconsistent, save it again with its tokenizer")

    def finetune_backbone(self, dropout: float) -> Backbone:
        """The backbone fine-tuning trains, the one already loaded (a transformers model keeps its own config's
        dropout)."""
        return self.backbone

    def finetune_model(self, dropout: float, trust_remote_code: bool) -> dict[str, Any]:
        """A fine-tuning checkpoint's `model` hyperparameters, from which a reload rebuilds the backbone
        (sources.backbone_for): a transformers model reopens from its origin, its weights then replaced."""
        return {SOURCE_KEY: self.origin, "trust_remote_code": trust_remote_code}

    def own_margins(self) -> dict[str, Any] | None:
        """How far below the unigram baseline it learned its own objective (a study's gate): unknown for a release."""
        return None

    def summary(self) -> dict[str, Any]:
        return {"checkpoint": self.origin, "source": self.kind, "objective": self.name,
                "finetune_attention": self.reading.finetune_attention, "scoring": self.reading.scoring,
                "trained_length": self.trained_length, "longest_input": self.longest_input, **self.details}
