"""Words as fine-tuning sees them: the pretraining tokenizer's normalizer (lower-casing, accents) and its
pre-tokenizer (whitespace and punctuation), applied to the corpus, to benchmark words and to CoNLL's words.
So static vectors, type-level contextual vectors and the NER tagger all key on the same strings."""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Tokenizer, pre_tokenizers

from armlm.common.errors import ArmlmError

MAX_SENTENCE_WORDS = 1000  # gensim reads at most 10,000 words of a sentence; lines are cut well below that


class WordSplitter:
    def __init__(self, tokenizer_json: str) -> None:
        tokenizer = Tokenizer.from_str(tokenizer_json)
        if tokenizer.pre_tokenizer is None or isinstance(tokenizer.pre_tokenizer, pre_tokenizers.ByteLevel):
            # Byte-level pieces carry a space marker ('Ġword'), so they are not words a benchmark names.
            raise ArmlmError("word-level embeddings need a tokenizer that splits words on whitespace and punctuation, "
                             "not a byte-level BPE's (GPT-2's, RoBERTa's: their pieces carry the space); train armlm "
                             "runs with data.tokenizer.kind=wordpiece (the default), or use a WordPiece model")
        self.normalizer, self.pre_tokenizer = tokenizer.normalizer, tokenizer.pre_tokenizer

    def split(self, text: str) -> list[str]:
        """The words of a text, normalized as the tokenizer normalizes it."""
        normalized = self.normalizer.normalize_str(text) if self.normalizer is not None else text
        return [word for word, _ in self.pre_tokenizer.pre_tokenize_str(normalized)]

    def sentences(self, documents: Iterable[str], max_words: int = MAX_SENTENCE_WORDS) -> list[list[str]]:
        """Each non-empty line of each document as a list of words, long lines cut into pieces of `max_words`:
        a context window never crosses a line."""
        sentences = []
        for document in documents:
            for line in document.split("\n"):
                words = self.split(line)
                sentences += [words[i:i + max_words] for i in range(0, len(words), max_words)]
        return sentences
