"""Fine-tuning DataModules: GLUE-style tasks (the nine GLUE tasks, or any other in the release layout) and
CoNLL-2003 NER, encoded with a pretrained checkpoint's tokenizer. They know nothing of objectives; `info` (what
the task's config declares, with its labels and dev splits) tells the fine-tuning module what to build.
"""

from __future__ import annotations

import logging
from abc import abstractmethod
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import lightning as L
import torch
from omegaconf import OmegaConf
from tokenizers import Tokenizer
from torch.utils.data import DataLoader, Sampler
from tqdm.auto import tqdm

from armlm.common.errors import ArmlmError, ArmlmFileError
from armlm.common.seeding import derived_seed
from armlm.common.vocabulary import CLS, IGNORE_INDEX
from armlm.datamodules.conll import CONLL2003_TAGS, WORD_SUBWORDS, Sentence, read_conll, read_hub_conll, word_subwords
from armlm.datamodules.encoding import Encoded, TaskFrame, encode_pair, encode_words, pad_batch
from armlm.datamodules.glue import GlueTask, read_hub_split, read_release_split
from armlm.datamodules.sampler import ResumableSampler

log = logging.getLogger(__name__)
TASK_KINDS = ("classification", "regression", "tagging")


class LengthGroupedBatches(Sampler[list[int]]):
    """Shuffled batches of similar-length examples: each shuffled window of `window` batches is sorted by
    length before it is cut into batches, and the batches are shuffled again. Padding to the longest example
    of a batch then wastes little compute (on SST-2 a random batch is mostly padding).

    The order is a function of (seed, epoch) only: `sampler` draws the epoch's permutation (Lightning sets
    its epoch), and the batch shuffle is seeded from the same two numbers, so a run resumed at an epoch
    boundary sees the batches the uninterrupted run saw."""

    def __init__(self, lengths: list[int], batch_size: int, seed: int, window: int = 50) -> None:
        self.lengths, self.batch_size, self.window, self.seed = lengths, batch_size, window, seed
        self.sampler = ResumableSampler(lengths, num_replicas=1, rank=0, seed=seed)

    def __len__(self) -> int:
        return -(-len(self.lengths) // self.batch_size)

    def __iter__(self):
        order = list(self.sampler)
        span = self.batch_size * self.window
        batches = []
        for start in range(0, len(order), span):
            chunk = sorted(order[start:start + span], key=self.lengths.__getitem__)
            batches += [chunk[i:i + self.batch_size] for i in range(0, len(chunk), self.batch_size)]
        generator = torch.Generator().manual_seed(derived_seed(self.seed, self.sampler.epoch))
        for i in torch.randperm(len(batches), generator=generator).tolist():
            yield batches[i]


@dataclass(frozen=True)
class TaskInfo:
    """What a fine-tuning module needs to know about its task; plain data, stored in checkpoints. The task's config
    declares name, kind, metrics and primary_metric (configs/task/<name>.yaml); its data gives labels and splits."""

    name: str
    kind: str  # one of TASK_KINDS
    labels: tuple[str, ...]  # class or tag names in id order; empty for regression
    eval_splits: tuple[str, ...]  # dev splits, all evaluated (MNLI: matched and mismatched)
    metrics: dict[str, dict[str, Any]]  # metric name -> factory spec (finetune.metrics), in the order they log
    primary_metric: str  # the value plots and findings read: a metric's name, or one EntityF1 reports

    def __post_init__(self) -> None:
        # Configs give ListConfig/DictConfig, checkpoints lists: store plain tuples and dicts either way.
        object.__setattr__(self, "labels", tuple(str(label) for label in self.labels))
        object.__setattr__(self, "eval_splits", tuple(self.eval_splits))
        metrics = OmegaConf.to_container(self.metrics, resolve=True) if OmegaConf.is_config(self.metrics) \
            else self.metrics
        object.__setattr__(self, "metrics", {str(k): dict(v) for k, v in dict(metrics).items()})
        if self.kind not in TASK_KINDS:
            raise ArmlmError(f"task.kind={self.kind!r} for {self.name}; choose one of {TASK_KINDS}")
        if not self.metrics or any("_target_" not in spec for spec in self.metrics.values()):
            raise ArmlmError(f"task.metrics of {self.name} must map each metric's name to a factory spec with a "
                             "_target_ (armlm.finetune.metrics), e.g. accuracy: {_target_: armlm.finetune.metrics.accuracy}")
        if not self.primary_metric or not isinstance(self.primary_metric, str):
            raise ArmlmError(f"task.primary_metric={self.primary_metric!r} for {self.name}: name the value that "
                             "plots and findings read (a metric of task.metrics, or one it computes, as EntityF1's f1)")


class FinetuneDataModule(L.LightningDataModule):
    """Reads the train split and every eval split, encodes them once (with a progress bar) and serves
    batches padded to their longest example."""

    def __init__(self, info: TaskInfo, tokenizer_json: str, max_length: int = 128, batch_size: int = 32,
                 eval_batch_size: int = 128, max_train_examples: int | None = None,
                 max_eval_examples: int | None = None, group_by_length: bool = True, num_workers: int = 0,
                 seed: int = 0) -> None:
        super().__init__()
        self.info = info
        if max_length < 4:
            raise ArmlmError(f"task.data.max_length={max_length} leaves no room for text; use at least 4")
        self.tokenizer = Tokenizer.from_str(tokenizer_json)
        self.frame = TaskFrame.of_armlm(self.tokenizer) if self.tokenizer.token_to_id(CLS) is not None else None
        self.pad_id = None if self.frame is None else self.frame.pad
        self.max_length, self.batch_size, self.eval_batch_size = max_length, batch_size, eval_batch_size
        self.max_train_examples, self.max_eval_examples = max_train_examples, max_eval_examples
        self.group_by_length, self.num_workers, self.seed = group_by_length, num_workers, seed
        self.encoded: dict[str, list[Encoded]] = {}
        # per evaluation split, the cluster each example was drawn in (cluster_of), where the task has clusters
        self.clusters: dict[str, list[int]] = {}
        self.word_subword = "first"

    def use_frame(self, frame: TaskFrame) -> None:
        """Lay the texts out in another model's frame (sources.SpecialTokens.task_frame: a transformers tokenizer's
        template). Set before `setup`."""
        if self.encoded:
            raise RuntimeError("use_frame after setup: the splits are already encoded; call it first")
        self.frame, self.pad_id = frame, frame.pad

    def read_words_at(self, subword: str) -> None:
        """Which subword of a word a word-level task labels and scores: `first`, or `last`, the one a causal
        reader sees the whole word at. Set before `setup`; a task without words encodes the same either way."""
        if subword not in WORD_SUBWORDS:
            raise ArmlmError(f"finetune.word_subword={subword!r}; choose first, last or auto (last for a causal reader)")
        if self.encoded and subword != self.word_subword:
            raise RuntimeError("read_words_at after setup: the splits are already encoded; call it first")
        self.word_subword = subword

    @abstractmethod
    def read_split(self, split: str) -> list[Any]:
        """The raw examples of one split."""

    @abstractmethod
    def encode(self, example: Any) -> Encoded: ...

    def cluster_of(self, example: Any) -> int | None:
        """The group an evaluation example was sampled in (a CoNLL sentence's document), which a bootstrap over items
        resamples whole (analysis.findings.items); None where the examples are independent draws."""
        return None

    @classmethod
    def clusters_in(cls, source: str, split: str) -> list[int] | None:
        """Each example's cluster in a split, read from its source alone (for runs that predate items.json's)."""
        return None

    def setup(self, stage: str | None = None) -> None:
        if self.encoded:
            return
        if self.frame is None:
            raise ArmlmError("the tokenizer lacks [CLS]; a tokenizer that is not armlm's needs its model's frame "
                             "(FinetuneDataModule.use_frame) before setup")
        limits = {"train": self.max_train_examples}
        for split in ("train", *self.info.eval_splits):
            examples = self.read_split(split)[: limits.get(split, self.max_eval_examples)]
            if not examples:
                raise ArmlmError(f"{self.info.name} {split} has no examples; check task.data.source")
            clusters = [self.cluster_of(e) for e in examples] if split != "train" else [None]
            if None not in clusters:
                self.clusters[split] = clusters
            self.encoded[split] = [self.encode(e) for e in tqdm(examples, desc=f"encoding {self.info.name} {split}",
                                                                 leave=False)]
        log.info("%s: %s examples", self.info.name, {s: len(e) for s, e in self.encoded.items()})

    def majority_label(self) -> int | float:
        """The most frequent training label (the mean score, for regression): the baseline to beat."""
        labels = [e.labels for e in self.encoded["train"]]
        if self.info.kind == "regression":
            return sum(labels) / len(labels)
        if self.info.kind == "tagging":
            return self.info.labels.index("O")
        return Counter(labels).most_common(1)[0][0]

    def collate(self, examples: list[Encoded]) -> dict[str, torch.Tensor]:
        return pad_batch(examples, self.pad_id)

    def train_dataloader(self) -> DataLoader:
        train = self.encoded["train"]  # the run's seed decides the example order
        if self.group_by_length:
            batches = LengthGroupedBatches([len(e.input_ids) for e in train], self.batch_size, self.seed)
            return DataLoader(train, batch_sampler=batches, collate_fn=self.collate, num_workers=self.num_workers)
        trainer = getattr(self, "trainer", None)
        world, rank = (trainer.world_size, trainer.global_rank) if trainer is not None else (1, 0)
        sampler = ResumableSampler(train, num_replicas=world, rank=rank, seed=self.seed)  # (seed, epoch) order
        return DataLoader(train, batch_size=self.batch_size, sampler=sampler, collate_fn=self.collate,
                          num_workers=self.num_workers)

    def val_dataloader(self) -> list[DataLoader]:
        # Evaluation order does not matter to the metrics, so sorted by length: least padding.
        return [DataLoader(sorted(self.encoded[split], key=lambda e: len(e.input_ids)), batch_size=self.eval_batch_size,
                           collate_fn=self.collate, num_workers=self.num_workers) for split in self.info.eval_splits]


def is_saved_dataset(path: Path) -> bool:
    """A folder written by `datasets.DatasetDict.save_to_disk`."""
    return (path / "dataset_dict.json").is_file()


GLUE_SPEC = tuple(f.name for f in fields(GlueTask) if f.name != "name")  # task.data keys that describe the files


class GlueDataModule(FinetuneDataModule):
    """A GLUE-style task from a folder in the release layout (`<source>/<folder>/train.tsv`, ...), a saved
    `datasets` folder, or otherwise the Hugging Face dataset named by `source` (e.g. nyu-mll/glue, config = the
    task's name). `settings` holds the reader's specification (GLUE_SPEC: folder, text_columns, label_column,
    labels, ...; configs/task/<name>.yaml) beside FinetuneDataModule's settings."""

    def __init__(self, source: str, *, name: str, kind: str, metrics: Mapping[str, Any], primary_metric: str,
                 **settings: Any) -> None:
        self.task = GlueTask.from_config(name, {k: settings.pop(k) for k in GLUE_SPEC if k in settings})
        expected = "regression" if self.task.is_regression else "classification"
        if kind != expected:
            raise ArmlmError(f"task.kind={kind!r} for {name}, but its task.data.labels {list(self.task.labels)} make "
                             f"it a {expected} task (regression: no labels)")
        self.source = source
        super().__init__(TaskInfo(name, kind, self.task.labels, self.task.dev_splits, metrics, primary_metric),
                         **settings)

    def read_split(self, split: str) -> list[Any]:
        source = Path(self.source)
        if source.is_dir() and not is_saved_dataset(source):
            return read_release_split(self.task, source, split)  # names the missing file if it is not there
        return read_hub_split(self.task, split, self.source)

    def encode(self, example: Any) -> Encoded:
        return encode_pair(self.tokenizer, example.text_a, example.text_b, example.label, self.max_length, self.frame)


class ConllDataModule(FinetuneDataModule):
    """CoNLL-2003 NER from a folder holding eng.train/eng.testa/eng.testb (or train.txt/valid.txt/test.txt),
    a saved `datasets` folder, or the Hugging Face dataset named by `source`. Scored on words."""

    FILE_NAMES = {"train": ("eng.train", "train.txt"), "validation": ("eng.testa", "valid.txt"),
                  "test": ("eng.testb", "test.txt")}

    def __init__(self, source: str, *, name: str, kind: str, metrics: Mapping[str, Any], primary_metric: str,
                 eval_splits: tuple[str, ...] = ("validation",), **settings: Any) -> None:
        unknown = [s for s in eval_splits if s not in self.FILE_NAMES]
        if unknown:
            raise ArmlmError(f"task.data.eval_splits has {unknown}; choose from validation, test")
        if kind != "tagging":
            raise ArmlmError(f"task.kind={kind!r} for {name}: CoNLL-2003 NER tags words; set task.kind=tagging")
        self.source, self.eval_splits = source, tuple(eval_splits)
        self.word_index: dict[str, int] | None = None
        super().__init__(TaskInfo(name, kind, CONLL2003_TAGS, self.eval_splits, metrics, primary_metric), **settings)

    def index_words(self, index: dict[str, int]) -> None:
        """Batches then carry `word_vector_ids` (B, words): each word's row in a table of word vectors, 0 for a
        word the index lacks (feature-based NER on static vectors)."""
        self.word_index = index

    def words(self) -> set[str]:
        """Every word of every encoded split, as the task writes it."""
        return {word for examples in self.encoded.values() for example in examples for word in example.words or ()}

    def read_split(self, split: str) -> list[Sentence]:
        return self.read_source(self.source, split)

    @classmethod
    def read_source(cls, source: str, split: str) -> list[Sentence]:
        folder = Path(source)
        if not folder.is_dir() or is_saved_dataset(folder):
            return read_hub_conll(split, source)
        for name in cls.FILE_NAMES[split]:
            if (folder / name).is_file():
                return read_conll(folder / name, CONLL2003_TAGS)
        raise ArmlmFileError(f"CoNLL-2003 {split}: {folder} has none of {cls.FILE_NAMES[split]}; point "
                                "task.data.source at the folder holding the shared-task files")

    @classmethod
    def clusters_in(cls, source: str, split: str) -> list[int] | None:
        """Each example's cluster in a split, read from its source alone (for runs that predate items.json's)."""
        documents = [sentence.document for sentence in cls.read_source(source, split)]
        return None if None in documents else documents

    def cluster_of(self, sentence: Sentence) -> int | None:
        return sentence.document

    def encode(self, sentence: Sentence) -> Encoded:
        tag_ids = [CONLL2003_TAGS.index(tag) for tag in sentence.tags]
        return encode_words(self.tokenizer, list(sentence.words), tag_ids, self.max_length, self.word_subword,
                            self.frame)

    def collate(self, examples: list[Encoded]) -> dict[str, torch.Tensor]:
        """Adds the word-level view scoring needs: the position of the subword each word is read at (-1 when the
        length limit cut the word off, so it is scored as a miss, not dropped) and its gold tag."""
        batch = pad_batch(examples, self.pad_id)
        n_words = max(len(e.word_labels) for e in examples)
        positions = torch.full((len(examples), n_words), -1)
        gold = torch.full((len(examples), n_words), IGNORE_INDEX)
        for row, example in enumerate(examples):
            gold[row, : len(example.word_labels)] = torch.tensor(example.word_labels)
            for position, word in word_subwords(example.word_ids, self.word_subword):
                positions[row, word] = position
        batch["word_positions"], batch["word_labels"] = positions, gold
        if self.word_index is not None:
            batch["word_vector_ids"] = torch.tensor([[self.word_index.get(w, 0) for w in e.words] + [0] * (
                n_words - len(e.words)) for e in examples])
        return batch
