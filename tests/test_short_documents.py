"""Short, unrelated documents cut from another corpus (datamodules.short_documents)."""

from collections import Counter

import pytest

from armlm.datamodules.corpora import Corpus
from armlm.datamodules.short_documents import ShortDocuments, pieces


class Articles(Corpus):
    """Twenty long made-up articles, each with its own vocabulary, so a piece names its article."""

    def describe(self) -> str:
        return "made-up articles"

    def read_documents(self) -> list[tuple[str, str]]:
        return [(f"a{i}", "\n\n".join(" ".join(f"w{i}x{j}" for j in range(k, k + 25)) for k in range(0, 100, 25)))
                for i in range(20)]


def test_pieces_cut_at_word_counts_and_keep_every_word():
    text = "one two  three\nfour five\n\nsix seven"
    assert pieces(text, 3) == ["one two three", "four five six", "seven"]
    assert pieces("", 3) == []


def test_every_document_becomes_shuffled_pieces_in_its_own_split():
    inner = Articles(val_fraction=0.1)
    corpus = ShortDocuments(inner, words=8, seed=0)
    splits, originals = corpus.load(), inner.load()
    for split in ("train", "validation"):
        assert all(len(piece.split()) <= 8 for piece in splits[split])
        # the same words in the same split, none lost or moved across
        assert Counter(" ".join(splits[split]).split()) == Counter(" ".join(originals[split]).split())
    # shuffled: neighbours come from different articles (a piece's words name its article)
    articles = [piece.split()[0].split("x")[0] for piece in splits["train"]]
    assert sum(a != b for a, b in zip(articles, articles[1:])) > len(articles) / 2
    assert ShortDocuments(Articles(val_fraction=0.1), words=8, seed=0).load() == splits  # seeded
    assert ShortDocuments(Articles(val_fraction=0.1), words=8, seed=1).load()["train"] != splits["train"]


def test_the_fingerprint_follows_the_settings_and_the_wrapped_corpus():
    base = ShortDocuments(Articles(), words=8).fingerprint()
    assert base != ShortDocuments(Articles(), words=9).fingerprint() != ShortDocuments(Articles(), seed=1).fingerprint()
    assert base["of"] == Articles().fingerprint()


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="words"):
        ShortDocuments(Articles(), words=0)
    streaming = Articles()
    streaming.streaming = True
    with pytest.raises(ValueError, match="streaming=false"):
        ShortDocuments(streaming)
