"""Pretraining corpora: each reads documents and splits them into train / validation by document.

Every corpus reports a `fingerprint` (its settings plus the size and mtime of the files it reads) that
keys the tokenizer and token caches, so a changed file or setting is never served from a stale cache.
"""

from __future__ import annotations

import bz2
import functools
import hashlib
import itertools
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from armlm.common.errors import ArmlmError, ArmlmFileError
from armlm.datamodules.textfile import read_utf8

Splits = dict[str, list[str]]  # "train" / "validation" -> documents
EMBEDDED_WIKI = "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"


def file_fingerprint(path: Path) -> list[Any]:
    stat = path.stat()
    return [str(path.resolve()), stat.st_size, stat.st_mtime_ns]


def split_by_document(docs: list[tuple[str, str]], val_fraction: float) -> Splits:
    """Deterministic split: the documents whose key hashes lowest go to validation (order-independent)."""
    docs = [(key, text) for key, text in docs if text.strip()]
    ranked = sorted(docs, key=lambda d: hashlib.sha1(d[0].encode()).hexdigest())
    n_val = round(len(docs) * val_fraction)
    if val_fraction > 0 and len(docs) >= 2:
        n_val = min(max(n_val, 1), len(docs) - 1)
    val_keys = {key for key, _ in ranked[:n_val]}
    return {
        "train": [text for key, text in docs if key not in val_keys],
        "validation": [text for key, text in docs if key in val_keys],
    }


def in_validation(key: str, val_fraction: float) -> bool:
    """The streaming split: a document is validation when its key hashes below val_fraction of the hash range, so
    each document is placed on its own, in one pass, whatever the corpus size (about val_fraction of them)."""
    return int(hashlib.sha1(key.encode()).hexdigest()[:15], 16) < val_fraction * 16**15


class Corpus(ABC):
    """A source of documents. Subclasses implement `read_documents` (then split here) or `read_splits`; one that can
    stream takes a `streaming` setting and implements `streamed`."""

    streaming = False  # read lazily, document by document (`streamed`), instead of whole (`read_splits`)

    def __init__(self, val_fraction: float = 0.05) -> None:
        if not 0.0 <= val_fraction < 1.0:
            raise ArmlmError(f"data.corpus.val_fraction={val_fraction} must be in [0, 1)")
        self.val_fraction = val_fraction
        self._splits: Splits | None = None

    def documents(self, split: str) -> Iterable[str]:
        """The split's documents in corpus order. Read whole once and kept (the default, for corpora that fit
        in memory); a streaming corpus reads them again, lazily, on every call."""
        if self.streaming:
            return self.streamed(split)
        if self._splits is None:
            self._splits = self.load()
        return self._splits[split]

    def streamed(self, split: str) -> Iterator[str]:
        """The split's non-empty documents read lazily, each placed by `in_validation` (streaming corpora)."""
        raise NotImplementedError(f"{self.describe()} cannot stream; set data.corpus.streaming=false")

    @property
    def name(self) -> str:
        return type(self).__name__

    def fingerprint(self) -> dict[str, Any]:
        return {"corpus": self.name, "val_fraction": self.val_fraction}

    def read_documents(self) -> list[tuple[str, str]]:
        """(stable key, text) pairs; the key decides the split."""
        raise NotImplementedError

    def load(self) -> Splits:
        """Both splits in memory; a streaming corpus's are its streaming split (what training used)."""
        if self.streaming:
            return {split: list(self.streamed(split)) for split in ("train", "validation")}
        return self.read_splits()

    def read_splits(self) -> Splits:
        """Both splits, read whole."""
        splits = split_by_document(self.read_documents(), self.val_fraction)
        if not splits["train"]:
            raise ArmlmError(f"{self.describe()} contains no non-empty documents; point it at real text")
        return splits

    @abstractmethod
    def describe(self) -> str:
        """Human-readable origin, used in error messages."""


class EmbeddedWikipedia(Corpus):
    """The English Wikipedia excerpt shipped inside gensim's wheel (107 articles, ~3.1M characters),
    extracted with gensim's own Wikipedia utilities so it works on a fresh offline machine."""

    def path(self) -> Path:
        import gensim  # gensim.test.utils.datapath would also build gensim's test fixtures

        return Path(gensim.__file__).parent / "test" / "test_data" / EMBEDDED_WIKI

    def describe(self) -> str:
        return f"the embedded Wikipedia excerpt ({self.path()})"

    def fingerprint(self) -> dict[str, Any]:
        # "cleaning" names the version of tidy_wiki_text, so caches built from differently cleaned text
        # are never reused (2: list markers stripped from line starts).
        return {**super().fingerprint(), "file": file_fingerprint(self.path()), "cleaning": 2}

    def read_documents(self) -> list[tuple[str, str]]:
        path = self.path()
        stat = path.stat()
        return list(extracted_wikipedia(str(path), stat.st_size, stat.st_mtime_ns))


@functools.lru_cache(maxsize=2)
def extracted_wikipedia(path: str, size: int, mtime_ns: int) -> tuple[tuple[str, str], ...]:
    """(title, text) of every article of a Wikipedia dump, once per process and file version: extraction takes
    seconds, and one process (diagnostics after training, the tests) often reads the excerpt more than once."""
    from gensim.corpora.wikicorpus import extract_pages, filter_wiki

    docs = []
    with bz2.open(path, "rb") as f:
        for title, markup, _ in extract_pages(f, filter_namespaces=("0",)):
            if markup.lstrip().lower().startswith("#redirect"):
                continue
            docs.append((title, tidy_wiki_text(filter_wiki(markup))))
    return tuple(docs)


def tidy_wiki_text(text: str) -> str:
    """gensim's filter_wiki leaves bold/italic quotes, heading equals signs, list and indentation markers
    (`*`, `#`, `:`, `;` at a line start) and runs of blank lines. The markers go: left in, many of the
    held-out sentences began with `*` and the diagnostics' pairs at position 1 were trivial."""
    text = re.sub(r"'{2,}", "", text)
    text = re.sub(r"^\s*=+\s*(.*?)\s*=+\s*$", r"\1", text, flags=re.MULTILINE)
    text = re.sub(r"^[^\S\n]*[*#:;]+[^\S\n]*", "", text, flags=re.MULTILINE)
    return re.sub(r"\n{3,}", "\n\n", text).strip()


class TextFiles(Corpus):
    """Local UTF-8 text: files and/or folders (every non-hidden file below them).

    Each file is one document, or, with `blank_line_documents`, blank lines separate documents."""

    def __init__(self, paths: list[str] | str, val_fraction: float = 0.05, blank_line_documents: bool = False,
                 streaming: bool = False) -> None:
        """`streaming`: read the files lazily, one document at a time, and split by `in_validation` (a corpus far
        larger than memory; a different split from the default's, so it has its own cache)."""
        super().__init__(val_fraction)
        self.paths = [Path(p) for p in ([paths] if isinstance(paths, str) else paths)]
        self.blank_line_documents, self.streaming = blank_line_documents, streaming

    def files(self) -> list[Path]:
        found: list[Path] = []
        for path in self.paths:
            if path.is_dir():
                found += sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
            elif path.is_file():
                found.append(path)
            else:
                raise ArmlmFileError(f"data.corpus.paths: {path} does not exist; give existing files or folders")
        if not found:
            raise ArmlmError(f"data.corpus.paths {[str(p) for p in self.paths]} contain no files")
        return found

    def describe(self) -> str:
        return f"text files {[str(p) for p in self.paths]}"

    def fingerprint(self) -> dict[str, Any]:
        streaming = {"streaming": True} if self.streaming else {}  # caches from before the setting keep their key
        return {**super().fingerprint(), "blank_line_documents": self.blank_line_documents, **streaming,
                "files": [file_fingerprint(p) for p in self.files()]}

    def streamed(self, split: str) -> Iterator[str]:
        return (text for key, text in self.stream_documents()
                if text.strip() and in_validation(key, self.val_fraction) == (split == "validation"))

    def stream_documents(self) -> Iterator[tuple[str, str]]:
        """(key, text) one document at a time, a file read line by line with blank_line_documents."""
        for path in self.files():
            if not self.blank_line_documents:
                yield str(path), read_utf8(path)
                continue
            index, lines = 0, []
            with open(path, "rb") as f:  # bytes, decoded line by line, so an error names its line
                for number, raw in enumerate(f, 1):
                    try:
                        line = raw.removeprefix(b"\xef\xbb\xbf" if number == 1 else b"").decode("utf-8")
                    except UnicodeDecodeError:
                        raise ArmlmError(f"{path}:{number}: not UTF-8 text; convert the file to UTF-8 or leave it "
                                         "out") from None
                    line = line.replace("\r\n", "\n").replace("\r", "\n")
                    if line.strip():
                        lines.append(line)
                    elif lines:
                        yield f"{path}#{index}", "".join(lines).rstrip("\n")
                        index, lines = index + 1, []
            if lines:
                yield f"{path}#{index}", "".join(lines).rstrip("\n")

    def read_documents(self) -> list[tuple[str, str]]:
        docs = []
        for path in self.files():
            text = read_utf8(path)
            if self.blank_line_documents:
                parts = re.split(r"\n\s*\n", text)
                docs += [(f"{path}#{i}", part) for i, part in enumerate(parts)]
            else:
                docs.append((str(path), text))
        return docs


class Mixture(Corpus):
    """Several corpora pretrained on together: each part splits itself, then the splits are concatenated,
    so a part's validation documents never reach training whatever it is mixed with."""

    def __init__(self, parts: list[Corpus]) -> None:
        super().__init__(val_fraction=0.0)
        if not parts:
            raise ArmlmError("data.corpus.parts is empty; list at least one corpus")
        self.parts = list(parts)

    def describe(self) -> str:
        return " + ".join(part.describe() for part in self.parts)

    def fingerprint(self) -> dict[str, Any]:
        return {"corpus": self.name, "parts": [part.fingerprint() for part in self.parts]}

    def documents(self, split: str) -> Iterable[str]:
        return itertools.chain.from_iterable(part.documents(split) for part in self.parts)

    def read_splits(self) -> Splits:
        splits: Splits = {"train": [], "validation": []}
        for part in self.parts:
            for split, docs in part.load().items():
                splits[split] += docs
        return splits
