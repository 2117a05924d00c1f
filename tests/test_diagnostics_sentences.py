"""diagnostics.sentences: which validation sentences the diagnostics read, and an error that names the filter that
left none."""

from __future__ import annotations

import pytest
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace

from armlm.common.errors import ArmlmError
from armlm.datamodules.corpora import Corpus
from armlm.diagnostics.sentences import sentence_texts

WORDS = ["the", "cat", "sat", "on", "mat", "."]


class Sentences(Corpus):
    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def read_splits(self) -> dict[str, list[str]]:
        return {"train": [self.text], "validation": [self.text]}

    def describe(self) -> str:
        return "the test's sentences"


def tokenizer() -> Tokenizer:
    vocab = {w: i for i, w in enumerate(["[UNK]", "[CLS]", *WORDS])}
    tok = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    return tok


def texts(corpus_text: str, **limits: int) -> list[str]:
    return [text for text, _ in sentence_texts(Sentences(corpus_text), tokenizer(), start=1, specials=[0, 1],
                                               **{"min_tokens": 2, "max_tokens": 8, **limits})]


def test_sentences_inside_the_length_limits_and_without_special_tokens_are_read():
    # "dog" is not in the vocabulary ([UNK]), "the cat ." is under 4 tokens
    assert texts("the cat sat on the mat .\nthe dog sat .\nthe cat .", min_tokens=4) == ["the cat sat on the mat ."]


def test_the_error_names_the_filter_that_left_no_sentence():
    with pytest.raises(ArmlmError, match="holds a special token"):  # the length filter kept it; [UNK] did not
        texts("the dog sat on the mat .")
    with pytest.raises(ArmlmError, match="has 2-3 tokens; lower sentences.min_tokens"):
        texts("the cat sat on the mat .", max_tokens=3)
