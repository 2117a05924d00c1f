"""Any Hugging Face dataset as a pretraining corpus: by hub name (online) or a packaged builder
(`text`, `json`, `parquet`, ...) with local `data_files`, which works offline."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from armlm.common.errors import ArmlmError, ArmlmFileError
from armlm.datamodules.corpora import Corpus, Splits, file_fingerprint, in_validation, split_by_document
from armlm.datamodules.release_corpora import split_wikitext_articles


class HuggingFaceCorpus(Corpus):
    """Rows of `text_column` are documents, or, with `wikitext_articles`, lines regrouped into articles
    on WikiText's ` = Title = ` headings (the hub's `wikitext` stores one line per row).

    With no `val_split`, validation documents are drawn from the training split by `val_fraction`."""

    def __init__(
        self,
        name: str,
        config: str | None = None,
        text_column: str = "text",
        train_split: str = "train",
        val_split: str | None = "validation",
        data_files: Any = None,
        wikitext_articles: bool = False,
        val_fraction: float = 0.05,
        revision: str | None = None,
        streaming: bool = False,
    ) -> None:
        """`streaming`: iterate the dataset's rows as they come (`datasets`' streaming mode: a hub dataset too large
        to download whole, or local files), split by `in_validation` when there is no val_split."""
        super().__init__(val_fraction)
        if streaming and wikitext_articles:
            raise ArmlmError("data.corpus.wikitext_articles regroups a whole split, which streaming does not hold; "
                             "set data.corpus.wikitext_articles=false with data.corpus.streaming=true")
        self.streaming = streaming
        self.dataset_name, self.config, self.text_column = name, config, text_column
        self.train_split, self.val_split = train_split, val_split
        self.data_files, self.wikitext_articles, self.revision = data_files, wikitext_articles, revision

    def describe(self) -> str:
        return f"Hugging Face dataset {self.dataset_name!r} (config {self.config!r})"

    def fingerprint(self) -> dict[str, Any]:
        return {**super().fingerprint(), "name": self.dataset_name, "config": self.config,
                "text_column": self.text_column, "splits": [self.train_split, self.val_split],
                "data_files": self.data_files, "local_files": self._local_file_stats(),
                "wikitext_articles": self.wikitext_articles, "revision": self.revision,
                **({"streaming": True} if self.streaming else {})}

    def _local_file_stats(self) -> list[list[Any]]:
        """Size and mtime of local data files: an edited file must not be served from the cache."""
        files = self.data_files
        if files is None:
            return []
        if isinstance(files, dict):
            files = list(files.values())
        flat = [f for group in ([files] if isinstance(files, str) else files)
                for f in ([group] if isinstance(group, str) else group)]
        return [file_fingerprint(Path(f)) for f in flat if Path(f).exists()]

    def streamed(self, split: str) -> Iterator[str]:
        if self.val_split is not None:
            return self._rows(self.train_split if split == "train" else self.val_split)
        return (text for i, text in enumerate(self._rows(self.train_split))
                if in_validation(f"{i}:{text[:200]}", self.val_fraction) == (split == "validation"))

    def _rows(self, split: str) -> Iterator[str]:
        """The split's non-empty texts, streamed."""
        dataset = self._dataset(split, streaming=True)
        for row in dataset:
            self._require_text_column(row)
            text = row[self.text_column]
            if isinstance(text, str) and text.strip():
                yield text

    def _require_text_column(self, columns: Iterable[str]) -> None:
        if self.text_column not in columns:
            raise ArmlmError(f"{self.describe()} has no column {self.text_column!r}; set data.corpus.text_column to "
                             f"one of {sorted(columns)}")

    def _dataset(self, split: str, streaming: bool = False) -> Any:
        import datasets

        try:
            return datasets.load_dataset(self.dataset_name, self.config, split=split, data_files=self.data_files,
                                         revision=self.revision, streaming=streaming)
        except (ConnectionError, OSError) as err:
            raise ConnectionError(
                f"could not load {self.describe()} split {split!r}: {err}. Offline? Either connect once so the "
                "Hugging Face cache fills, set HF_DATASETS_OFFLINE=1 to use that cache, or use a local corpus "
                "(data=text / data=wikitext / data=brown)."
            ) from err

    def _split(self, split: str) -> list[str]:
        dataset = self._dataset(split)
        self._require_text_column(dataset.column_names)
        rows = [t for t in dataset[self.text_column] if isinstance(t, str)]
        if self.wikitext_articles:
            return split_wikitext_articles([r.rstrip("\n") for r in rows])
        return [r for r in rows if r.strip()]

    def read_splits(self) -> Splits:
        train = self._split(self.train_split)
        if self.val_split is None:
            splits = split_by_document([(f"{i}:{d[:200]}", d) for i, d in enumerate(train)], self.val_fraction)
        else:
            splits = {"train": train, "validation": self._split(self.val_split)}
        if not splits["train"]:
            raise ArmlmError(f"{self.describe()} has no non-empty text in split {self.train_split!r}")
        return splits


def load_split(name: str, split: str, config: str | None = None, *, what: str, offline_fix: str) -> Any:
    """One split of a Hugging Face dataset: from a folder written with `DatasetDict.save_to_disk` (how the
    hub path is tested offline), else from the hub by name. Failures say what was wanted and the fix."""
    import datasets

    folder = Path(name).expanduser()
    if folder.is_dir():
        saved = datasets.load_from_disk(str(folder))
        if split not in saved:
            raise ArmlmFileError(f"{name} has no {split!r} split for {what} (it has {list(saved)})")
        return saved[split]
    if name.startswith((".", "~")) or folder.is_absolute() or name.count("/") > 1:  # a path: hub names are owner/name
        raise ArmlmFileError(f"no folder {name} ({folder.resolve()}) for {what}; set ARMLM_DATA_DIR or data_dir= to "
                             "the folder that holds the data, or task.data.source= to this one's")
    try:
        return datasets.load_dataset(name, config, split=split)
    except (ConnectionError, OSError) as err:
        # `data/glue` reads as a hub name and as a relative folder: where its first part is a folder here, a failure
        # names both, so a mistyped folder shows; a hub name such as nyu-mll/glue gets no remark about folders
        also_folder = f" (nor is it a folder here: no {folder.resolve()})" if folder.parent.is_dir() and "/" in name else ""
        raise ConnectionError(f"could not load {what} from the hub {name!r}{also_folder}: {err}. Offline? "
                              f"{offline_fix}") from err
