"""A corpus that comes split by its builder (gutenwiki-10m): its own train/ and validation/ folders of text files."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from armlm.common.errors import ArmlmError, ArmlmFileError
from armlm.datamodules.corpora import Corpus, Splits, TextFiles, file_fingerprint


class SplitTextFolder(Corpus):
    """A corpus that comes split: `train/` and `validation/` folders of UTF-8 text files under one folder (a `test/`
    folder, if any, is never read). Blank lines separate documents unless `blank_line_documents` is false.

    Both settings of `streaming` read the same documents in the same order (a file line by line): it only decides
    whether they are kept in memory, so it does not key the cache."""

    SPLITS = ("train", "validation")

    def __init__(self, path: str, blank_line_documents: bool = True, streaming: bool = False) -> None:
        super().__init__(val_fraction=0.0)
        self.path, self.blank_line_documents, self.streaming = Path(path), blank_line_documents, streaming
        if not self.path.is_dir():
            raise ArmlmFileError(f"data.corpus.path: {self.path} is not a folder; set ARMLM_DATA_DIR or give a "
                                    "folder holding train/ and validation/")
        missing = [split for split in self.SPLITS if not (self.path / split).is_dir()]
        if missing:
            raise ArmlmError(f"{self.path} has no {' or '.join(f'{m}/' for m in missing)} folder: this corpus reads "
                             "the folder's own splits; add them, or read one folder with data=text (it holds out "
                             "data.corpus.val_fraction of the documents)")

    def split_files(self, split: str) -> TextFiles:
        return TextFiles([str(self.path / split)], val_fraction=0.0, blank_line_documents=self.blank_line_documents)

    def describe(self) -> str:
        return f"the split text folder {self.path}"

    def fingerprint(self) -> dict[str, Any]:
        return {"corpus": self.name, "blank_line_documents": self.blank_line_documents,
                "files": {split: [file_fingerprint(p) for p in self.split_files(split).files()]
                          for split in self.SPLITS}}

    def streamed(self, split: str) -> Iterator[str]:
        return (text for _, text in self.split_files(split).stream_documents() if text.strip())

    def read_splits(self) -> Splits:
        splits = {split: list(self.streamed(split)) for split in self.SPLITS}
        for split, docs in splits.items():
            if not docs:
                raise ArmlmError(f"the {split} split of {self.describe()} has no non-empty documents; add text")
        return splits
