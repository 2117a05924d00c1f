"""CoNLL-2003 NER: the shared-task column format, with IOB1 tags converted to IOB2 (BIO)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from armlm.common.errors import ArmlmError, ArmlmFileError
from armlm.common.vocabulary import IGNORE_INDEX
from armlm.datamodules.hub import load_split
from armlm.datamodules.textfile import read_utf8

TAG = re.compile(r"^(O|[BI]-[A-Za-z]+)$")
# CoNLL-2003's tag set in the order of the Hugging Face copy's `ner_tags` ids.
CONLL2003_TAGS = ("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC")


@dataclass(frozen=True)
class Sentence:
    words: tuple[str, ...]
    tags: tuple[str, ...]  # IOB2
    document: int | None  # index of the -DOCSTART- section it belongs to (None: a copy that does not mark them)


def iob1_to_iob2(tags: list[str]) -> list[str]:
    """IOB1 starts an entity with I- unless it touches one of the same type; IOB2 always starts with B-."""
    converted = []
    for i, tag in enumerate(tags):
        if tag.startswith("I-"):
            previous = tags[i - 1] if i > 0 else "O"
            if previous == "O" or previous[2:] != tag[2:]:
                tag = "B-" + tag[2:]
        converted.append(tag)
    return converted


def read_conll(path: str | Path, tagset: tuple[str, ...] | None = None) -> list[Sentence]:
    """Sentences of a CoNLL file (`word POS chunk NER` per line, blank lines between sentences,
    `-DOCSTART-` lines between documents). The NER tag is the last column; with `tagset`, a tag outside
    it (after IOB2 conversion, so both B- and I- of each type) is an error naming the line."""
    path = Path(path)
    if not path.is_file():
        raise ArmlmFileError(f"CoNLL file {path} not found (expected eng.train/eng.testa/eng.testb "
                                "or train.txt/valid.txt/test.txt)")
    sentences: list[Sentence] = []
    words: list[str] = []
    tags: list[str] = []
    document = -1
    width: int | None = None  # columns per token line, fixed by the file's first token line

    def close() -> None:
        if words:
            sentences.append(Sentence(tuple(words), tuple(iob1_to_iob2(tags)), max(document, 0)))
            words.clear()
            tags.clear()

    for line_no, line in enumerate(read_utf8(path).split("\n"), start=1):
        fields = line.split()
        if not fields:
            close()
        elif fields[0] == "-DOCSTART-":
            close()
            document += 1
        elif len(fields) < 2 or not TAG.match(fields[-1]) or len(fields) != (width or len(fields)):
            raise ArmlmError(
                f"{path}:{line_no}: expected {width or 'at least 2'} columns ending in an NER tag like O, "
                f"B-PER or I-LOC, got {line.rstrip()!r}"
            )
        elif tagset is not None and fields[-1] != "O" and "B-" + fields[-1][2:] not in tagset:
            raise ArmlmError(f"{path}:{line_no}: tag {fields[-1]!r} is not in the task's tag set {tagset}; "
                             "fix the file or use a task whose tags it has")
        else:
            width = width or len(fields)
            words.append(fields[0])
            tags.append(fields[-1])
    close()
    return sentences


WORD_SUBWORDS = ("first", "last")


def word_subwords(word_ids: list[int | None], at: str = "first") -> list[tuple[int, int]]:
    """(token position, word index) of the subword each word is read at: its `first` or its `last` (of the
    subwords present: a word the length limit cut inside is read at its last kept one, so both readings score the
    same words). A causal reader sees the whole word only at its last subword; a bidirectional one sees it anywhere.

    `word_ids` is what a `tokenizers` Encoding reports (`Encoding.word_ids`): the word each token came from,
    None for special tokens."""
    if at not in WORD_SUBWORDS:
        raise ArmlmError(f"finetune.word_subword={at!r}; choose first, last or auto (last for a causal reader)")
    step = 1 if at == "first" else -1  # the first subword differs from the one before it, the last from the next

    def neighbour(i: int) -> int | None:
        return word_ids[i - step] if 0 <= i - step < len(word_ids) else None

    return [(i, word) for i, word in enumerate(word_ids) if word is not None and neighbour(i) != word]


def first_subwords(word_ids: list[int | None]) -> list[tuple[int, int]]:
    """(token position, word index) of each word's first subword."""
    return word_subwords(word_ids, "first")


def subword_labels(word_ids: list[int | None], word_labels: list[int], at: str = "first") -> list[int]:
    """Label the subword each word is read at (`word_subwords`); other subwords and special tokens get
    IGNORE_INDEX."""
    labels = [IGNORE_INDEX] * len(word_ids)
    for position, word in word_subwords(word_ids, at):
        labels[position] = word_labels[word]
    return labels


def word_predictions(word_ids: list[int | None], token_predictions: list[int], n_words: int,
                     at: str = "first") -> list[int | None]:
    """Back from subwords to words: each word takes the prediction at the subword it is read at. A word cut off
    by the length limit gets None, so the caller can score it as 'O' (it is missed, never dropped)."""
    words: list[int | None] = [None] * n_words
    for position, word in word_subwords(word_ids[: len(token_predictions)], at):
        words[word] = token_predictions[position]
    return words


def read_hub_conll(split: str, dataset_name: str = "eriktks/conll2003") -> list[Sentence]:
    """A split (`train`, `validation`, `test`) of a Hugging Face CoNLL-2003 copy (IOB2 `ner_tags` ids with
    their names in the features), by hub name or a folder written with `DatasetDict.save_to_disk`."""
    dataset = load_split(dataset_name, split, what=f"CoNLL-2003 {split}",
                         offline_fix="Point task.data.source at a folder with eng.train/eng.testa/eng.testb.")
    names = dataset.features["ner_tags"].feature.names
    return [Sentence(tuple(row["tokens"]), tuple(names[t] for t in row["ner_tags"]), None)
            for row in dataset if row["tokens"]]
