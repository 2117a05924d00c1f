"""Encode fine-tuning examples with a pretrained model's tokenizer, in the layout its pretraining used (`TaskFrame`).

For an armlm checkpoint, sentence pairs become `[CLS] A [SEP] B [SEP]` with segment ids 0 / 1 (as in mlm_nsp
pretraining), single sentences `[CLS] A [SEP]`; a transformers model uses its own tokenizer's template (RoBERTa's
`<s> A </s></s> B </s>`, GPT-2's BOS and no separator). NER sentences are encoded from their words, and one subword
of each word (the first, or the last for a causal reader) carries the word's label.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from tokenizers import Tokenizer

from armlm.common.errors import ArmlmError
from armlm.common.vocabulary import CLS, IGNORE_INDEX, PAD, SEP
from armlm.datamodules.conll import subword_labels


@dataclass
class Encoded:
    input_ids: list[int]
    token_type_ids: list[int]
    labels: int | float | list[int]
    word_ids: list[int | None] | None = None  # NER only: maps tokens back to words for word-level scoring
    word_labels: list[int] | None = None  # NER only: every word's gold tag, truncated words included
    words: tuple[str, ...] | None = None  # NER only: the words as the task wrote them (static vectors key on them)


def token_id(tokenizer: Tokenizer, token: str) -> int:
    """The id of a special token, or an error naming the fix when the tokenizer is not armlm's."""
    found = tokenizer.token_to_id(token)
    if found is None:
        raise ArmlmError(f"the tokenizer lacks {token}; use the tokenizer stored in an armlm checkpoint")
    return found


@dataclass(frozen=True)
class TaskFrame:
    """Where a task's text sits among special tokens: `start` A `between` B `end`, B's segment id, the padding id,
    and what a word is prefixed with when a sentence is encoded from its words (a byte-level BPE's space, so a word
    gets the pieces it has inside running text)."""

    start: int
    between: tuple[int, ...]
    end: tuple[int, ...]
    second_type: int
    pad: int
    word_prefix: str = ""

    @classmethod
    def of_armlm(cls, tokenizer: Tokenizer) -> TaskFrame:
        sep = token_id(tokenizer, SEP)
        return cls(token_id(tokenizer, CLS), (sep,), (sep,), 1, token_id(tokenizer, PAD))


def truncate_longest_first(a: list[int], b: list[int], budget: int) -> tuple[list[int], list[int]]:
    """Drop tokens from the end of the longer segment until both fit in `budget` tokens."""
    a, b = list(a), list(b)
    while len(a) + len(b) > budget:
        (a if len(a) >= len(b) else b).pop()
    return a, b


def encode_pair(tokenizer: Tokenizer, text_a: str, text_b: str | None, label: int | float,
                max_length: int, frame: TaskFrame | None = None) -> Encoded:
    f = TaskFrame.of_armlm(tokenizer) if frame is None else frame
    a = tokenizer.encode(text_a, add_special_tokens=False).ids
    if text_b is None:
        a = a[: max_length - 1 - len(f.end)]
        return Encoded([f.start, *a, *f.end], [0] * (len(a) + 1 + len(f.end)), label)
    b = tokenizer.encode(text_b, add_special_tokens=False).ids
    a, b = truncate_longest_first(a, b, max_length - 1 - len(f.between) - len(f.end))
    first = [f.start, *a, *f.between]
    return Encoded([*first, *b, *f.end], [0] * len(first) + [f.second_type] * (len(b) + len(f.end)), label)


def encode_words(tokenizer: Tokenizer, words: list[str], word_labels: list[int], max_length: int,
                 word_subword: str = "first", frame: TaskFrame | None = None) -> Encoded:
    """`[CLS] subwords [SEP]` (the frame's start and end), cut to `max_length`; labels on the subword each word is
    read at (`word_subword`: first or last), IGNORE_INDEX elsewhere."""
    f = TaskFrame.of_armlm(tokenizer) if frame is None else frame
    pieces = [f.word_prefix + w if k else w for k, w in enumerate(words)] if f.word_prefix else words
    encoding = tokenizer.encode(pieces, is_pretokenized=True, add_special_tokens=False)
    room = max_length - 1 - len(f.end)
    ids, word_ids = encoding.ids[:room], encoding.word_ids[:room]
    word_ids = [None, *word_ids, *[None] * len(f.end)]
    labels = subword_labels(word_ids, word_labels, word_subword)
    return Encoded([f.start, *ids, *f.end], [0] * len(word_ids), labels, word_ids, list(word_labels), tuple(words))


def pad_batch(examples: list[Encoded], pad_id: int) -> dict[str, torch.Tensor]:
    """Pad to the longest example of the batch (not to max_length): no compute on padding-only columns."""
    width = max(len(e.input_ids) for e in examples)
    batch = {
        "input_ids": torch.tensor([_padded(e.input_ids, pad_id, width) for e in examples]),
        "token_type_ids": torch.tensor([_padded(e.token_type_ids, 0, width) for e in examples]),
        "attention_mask": torch.tensor([_padded([1] * len(e.input_ids), 0, width) for e in examples]),
    }
    first = examples[0].labels
    if isinstance(first, list):
        batch["labels"] = torch.tensor([_padded(e.labels, IGNORE_INDEX, width) for e in examples])
    else:
        batch["labels"] = torch.tensor([e.labels for e in examples],
                                       dtype=torch.float32 if isinstance(first, float) else torch.long)
    return batch


def _padded(values: list, fill: int, width: int) -> list:
    return values + [fill] * (width - len(values))


def pad_id_of(tokenizer: Tokenizer) -> int:
    return token_id(tokenizer, PAD)
