"""A corpus of short, unrelated documents made from another corpus: the data that document-masked packing
(data.cross_document_attention) acts on.

armlm's corpora hold long documents (the embedded Wikipedia excerpt's articles run to about 12,000 tokens), so at
its block sizes few packed blocks hold a document boundary at all, and whether a position may attend across one
hardly arises. Web-scale pretraining data are many short documents, several to a block, each beside text it has
nothing to do with. This wrapper cuts every document of the wrapped corpus into pieces of `words` whitespace words,
makes each piece a document of its own, and shuffles the pieces of each split with a fixed seed (the same data for
every arm and run seed): neighbours in a block are then unrelated pieces, as in such data.
"""

from __future__ import annotations

import random
from typing import Any

from armlm.common.errors import ArmlmError
from armlm.datamodules.corpora import Corpus, Splits


def pieces(text: str, words: int) -> list[str]:
    """`text` cut into runs of `words` whitespace words (the last may be shorter), joined by single spaces."""
    tokens = text.split()
    return [" ".join(tokens[start:start + words]) for start in range(0, len(tokens), words)]


class ShortDocuments(Corpus):
    """The wrapped corpus's documents cut into `words`-word pieces, each a document, in a seeded random order per
    split. A piece stays in its document's split, so validation text is never seen in training."""

    def __init__(self, corpus: Corpus, words: int = 32, seed: int = 0) -> None:
        super().__init__(corpus.val_fraction)
        if isinstance(words, bool) or not isinstance(words, int) or words < 1:
            raise ArmlmError(f"data.corpus.words={words!r} must be a positive number of words a document")
        if corpus.streaming:
            raise ArmlmError(f"{corpus.describe()} streams; short documents are shuffled in memory, so set "
                             "data.corpus.corpus.streaming=false")
        self.corpus, self.words, self.seed = corpus, words, seed

    def describe(self) -> str:
        return f"{self.corpus.describe()}, cut into {self.words}-word documents (seed {self.seed})"

    def fingerprint(self) -> dict[str, Any]:
        return {"corpus": self.name, "of": self.corpus.fingerprint(), "words": self.words, "seed": self.seed}

    def read_splits(self) -> Splits:
        shuffled: Splits = {}
        for split, documents in self.corpus.load().items():
            cut = [piece for document in documents for piece in pieces(document, self.words)]
            random.Random(f"{self.seed}-{split}").shuffle(cut)
            shuffled[split] = cut
        if not shuffled.get("train"):
            raise ArmlmError(f"{self.describe()} has no training text; point data.corpus.corpus at real text")
        return shuffled
