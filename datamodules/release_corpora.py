"""Corpora read from their release files' own formats: NLTK's tagged Brown corpus and WikiText's
article-per-heading text files (the hub's WikiText rows are split with the same heading rule)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from armlm.common.errors import ArmlmError, ArmlmFileError
from armlm.datamodules.corpora import Corpus, Splits, file_fingerprint, split_by_document
from armlm.datamodules.textfile import read_utf8


class BrownCorpus(Corpus):
    """NLTK's Brown corpus (Form C): one sentence per line of `word/tag` tokens; one document per file."""

    FILE_NAME = re.compile(r"^c[a-r]\d\d$")

    def __init__(self, path: str, val_fraction: float = 0.05) -> None:
        super().__init__(val_fraction)
        self.path = Path(path)

    def files(self) -> list[Path]:
        if not self.path.is_dir():
            raise ArmlmFileError(
                f"Brown corpus folder {self.path} not found; set ARMLM_DATA_DIR or data.corpus.path"
            )
        files = sorted(p for p in self.path.iterdir() if self.FILE_NAME.match(p.name))
        if not files:
            raise ArmlmError(f"{self.path} has no Brown files (ca01 ... cr09)")
        return files

    def describe(self) -> str:
        return f"the Brown corpus at {self.path}"

    def fingerprint(self) -> dict[str, Any]:
        return {**super().fingerprint(), "files": [file_fingerprint(p) for p in self.files()]}

    def read_documents(self) -> list[tuple[str, str]]:
        return [(path.name, brown_to_text(read_utf8(path))) for path in self.files()]


def brown_to_text(tagged: str) -> str:
    """`The/at jury/nn said/vbd ./.` -> `The jury said .`, one sentence per line."""
    quotes = {"``": '"', "''": '"'}
    sentences = []
    for line in tagged.splitlines():
        words = [token.rsplit("/", 1)[0] for token in line.split()]
        if words:
            sentences.append(" ".join(quotes.get(w, w) for w in words))
    return "\n".join(sentences)


WIKITEXT_TITLE = re.compile(r"^ ?= [^=].* = ?$")


def split_wikitext_articles(lines: list[str]) -> list[str]:
    """WikiText release files: an article starts at each ` = Title = ` line (subsections use `= =`)."""
    articles: list[list[str]] = []
    for line in lines:
        if WIKITEXT_TITLE.match(line.rstrip("\n")) or not articles:
            articles.append([])
        articles[-1].append(line.rstrip("\n"))
    return ["\n".join(a).strip() for a in articles if "".join(a).strip()]


class WikiText(Corpus):
    """WikiText release files (`wiki.{train,valid,test}.{tokens,raw}`), articles split on their headings.

    With no `valid_file`, validation articles are drawn from `train_file` by `val_fraction`."""

    def __init__(self, train_file: str, valid_file: str | None = None, val_fraction: float = 0.05) -> None:
        super().__init__(val_fraction)
        self.train_file = Path(train_file)
        self.valid_file = Path(valid_file) if valid_file else None

    def describe(self) -> str:
        return f"WikiText {self.train_file}"

    def _files(self) -> list[Path]:
        files = [self.train_file] + ([self.valid_file] if self.valid_file else [])
        for f in files:
            if not f.is_file():
                raise ArmlmFileError(f"WikiText file {f} not found; set data.corpus.train_file/valid_file")
        return files

    def fingerprint(self) -> dict[str, Any]:
        return {**super().fingerprint(), "files": [file_fingerprint(p) for p in self._files()]}

    def _articles(self, path: Path) -> list[str]:
        return split_wikitext_articles(read_utf8(path).splitlines())

    def read_splits(self) -> Splits:
        self._files()
        if self.valid_file is None:
            articles = self._articles(self.train_file)
            splits = split_by_document([(f"{i}:{a[:200]}", a) for i, a in enumerate(articles)], self.val_fraction)
        else:
            splits = {"train": self._articles(self.train_file), "validation": self._articles(self.valid_file)}
        if not splits["train"]:
            raise ArmlmError(f"{self.describe()} contains no articles")
        return splits
