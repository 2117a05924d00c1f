"""The pretraining DataModule: corpus -> tokenizer (trained once) -> sharded, memory-mapped token cache -> batches.

It knows nothing about objectives; an objective only says which input format it needs ("blocks" or
"segment_pairs"), and both formats are read from the same cache with the same tokenizer.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import lightning as L
import numpy as np
from tokenizers import Tokenizer
from torch.utils.data import DataLoader, Dataset

from armlm.common.errors import ArmlmError
from armlm.common.vocabulary import Vocabulary
from armlm.datamodules.blocks import PackedBlocks, SegmentPairs
from armlm.datamodules.cache import atomic_directory, settings_key
from armlm.datamodules.corpora import Corpus
from armlm.datamodules.sampler import ResumableSampler, rank_batches
from armlm.datamodules.shards import MANIFEST, check_encode_settings, encode_to_shards, read_shards, split_words
from armlm.datamodules.tokenizer import TokenizerSettings, train_tokenizer, vocabulary_of
from armlm.datamodules.words import block_words, word_starts

log = logging.getLogger(__name__)
SPLITS = ("train", "validation")
INPUT_FORMATS = ("blocks", "segment_pairs")


def default_cache_dir() -> str:
    return os.environ.get("ARMLM_CACHE_DIR", str(Path.home() / ".cache" / "armlm"))


@dataclass(frozen=True)
class CachePaths:
    tokenizer: Path  # folder holding tokenizer.json
    splits: dict[str, Path]  # split -> folder of token shards (datamodules.shards)

    def complete(self) -> bool:
        return (self.tokenizer / "tokenizer.json").is_file() and all(
            (p / MANIFEST).is_file() for p in self.splits.values()
        )


class PretrainDataModule(L.LightningDataModule):
    def __init__(
        self,
        corpus: Corpus,
        tokenizer: TokenizerSettings | dict | None = None,
        cache_dir: str | None = None,
        block_size: int = 128,
        batch_size: int = 32,
        val_batch_size: int | None = None,
        num_workers: int = 0,
        input_format: str = "blocks",
        seed: int = 0,
        max_train_tokens: int | None = None,
        encode_workers: int = 1,
        shard_chars: int = 8_000_000,
        cross_document_attention: bool = True,
    ) -> None:
        """`max_train_tokens`: train on the first N tokens of the train split only (the unique data of a
        data-constrained run; more steps repeat it). The tokenizer is still the whole split's, so runs on
        different slices share it, and the validation split is untouched. `encode_workers` processes encode the
        cache in shards of about `shard_chars` characters (datamodules.shards); neither changes the tokens.
        `cross_document_attention=False`: each block carries its document ids, and every objective then attends only
        within a document (models.attention, Attention.within); the tokens and blocks are the same."""
        super().__init__()
        if not isinstance(cross_document_attention, bool):
            raise ArmlmError(f"data.cross_document_attention={cross_document_attention!r}; give true or false")
        if not cross_document_attention and input_format != "blocks":
            raise ArmlmError(f"data.cross_document_attention=false keeps packed documents apart; input format "
                             f"{input_format!r} (this objective's) puts two documents in one input on purpose "
                             "(next-sentence prediction's negatives): leave it true")
        self.cross_document_attention = cross_document_attention
        if max_train_tokens is not None and (isinstance(max_train_tokens, bool) or not isinstance(max_train_tokens, int)
                                             or max_train_tokens < block_size):
            raise ArmlmError(f"data.max_train_tokens={max_train_tokens!r}: give a number of tokens >= data.block_size "
                             f"({block_size}), or null for the whole train split")
        if max_train_tokens is not None and input_format != "blocks":
            raise ArmlmError(f"data.max_train_tokens slices packed blocks; input format {input_format!r} (this "
                             "objective's) pairs documents, which a token slice would cut: use the whole split")
        self.max_train_tokens = max_train_tokens
        check_encode_settings(encode_workers, shard_chars)
        self.encode_workers, self.shard_chars = encode_workers, shard_chars
        # data.block_size, batch_size and num_workers are checked (types and ranges) with the run's other
        # settings before anything is built: training.validate.
        if input_format not in INPUT_FORMATS:
            raise ArmlmError(f"input_format={input_format!r}; choose one of {INPUT_FORMATS}")
        self.corpus = corpus
        self.tokenizer_settings = (
            tokenizer if isinstance(tokenizer, TokenizerSettings) else TokenizerSettings(**(tokenizer or {}))
        )
        self.cache_dir = Path(cache_dir or default_cache_dir()).expanduser()
        self.block_size, self.batch_size = block_size, batch_size
        self.val_batch_size = val_batch_size or batch_size
        self.num_workers, self.input_format, self.seed = num_workers, input_format, seed
        self.pin_memory = False
        self.tokenizer: Tokenizer | None = None
        self.vocabulary: Vocabulary | None = None
        self.unigram_baseline: float | None = None
        self.train_tokens: int | None = None
        self.train_words: float | None = None  # whitespace words of the text train_tokens encode (None: not counted)
        self.datasets: dict[str, Dataset] = {}
        # How far training has got: the epoch and the batches of it trained on (training.callbacks.DataPosition
        # says), saved in every checkpoint through state_dict; after a resume the sampler continues from there.
        self.position: dict[str, int] | None = None
        self.resume_position: dict[str, int] | None = None

    def cache_paths(self) -> CachePaths:
        corpus_dir = self.cache_dir / f"{self.corpus.name.lower()}-{settings_key(self.corpus.fingerprint())}"
        root = corpus_dir / f"{self.tokenizer_settings.kind}-{settings_key(self.tokenizer_settings.to_dict())}"
        return CachePaths(root / "tokenizer", {split: root / f"{split}-shards" for split in SPLITS})

    def prepare_data(self) -> None:
        """Build whatever part of the cache is missing (Lightning runs this on one process per node)."""
        paths = self.cache_paths()
        if paths.complete():
            return
        log.info("reading %s", self.corpus.describe())
        tokenizer_file = paths.tokenizer / "tokenizer.json"
        if not tokenizer_file.is_file():
            sample = self.tokenizer_settings.sample_chars
            log.info("training a tokenizer (%s) on %s", self.tokenizer_settings,
                     "the train split" if sample is None else f"a seeded sample of {sample:,} characters")
            tokenizer = train_tokenizer(self.corpus.documents("train"), self.tokenizer_settings)
            with atomic_directory(paths.tokenizer) as tmp:
                tokenizer.save(str(tmp / "tokenizer.json"))
        tokenizer = Tokenizer.from_file(str(tokenizer_file))
        for split, folder in paths.splits.items():
            report = encode_to_shards(tokenizer, self.corpus.documents(split), folder, workers=self.encode_workers,
                                      shard_chars=self.shard_chars, desc=split)
            if report.tokens == 0:  # encode_to_shards left no manifest: the next run tries again
                raise ArmlmError(f"the {split} split of {self.corpus.describe()} is empty after tokenization; "
                                 "add text or change data.corpus.val_fraction")
            if report.encoded:
                log.info("%s: %d shards (%d encoded now), %d tokens", split, report.shards, report.encoded,
                         report.tokens)
        log.info("token cache written to %s", paths.tokenizer.parent)

    def setup(self, stage: str | None = None) -> None:
        if self.vocabulary is not None:
            return
        paths = self.cache_paths()
        if not paths.complete():
            self.prepare_data()  # direct use outside a Trainer, or a rank that did not prepare
        log.info("tokenizer and token cache: %s", paths.tokenizer.parent)
        self.tokenizer = Tokenizer.from_file(str(paths.tokenizer / "tokenizer.json"))
        caches = {split: read_shards(folder) for split, folder in paths.splits.items()}
        self.train_words = split_words(paths.splits["train"])
        if self.max_train_tokens is not None:
            tokens, offsets = caches["train"]
            if len(tokens) < self.max_train_tokens:
                raise ArmlmError(f"data.max_train_tokens={self.max_train_tokens}, but the train split of "
                                 f"{self.corpus.describe()} has {len(tokens)} tokens; give at most that")
            caches["train"] = (tokens.head(self.max_train_tokens), offsets)
            if self.train_words is not None:  # the slice's share of the split's words, to within a document
                self.train_words *= self.max_train_tokens / len(tokens)
        self.train_tokens = len(caches["train"][0])  # the unique tokens one epoch passes over
        vocab_size = self.tokenizer.get_vocab_size()
        self.vocabulary = vocabulary_of(self.tokenizer, caches["train"][0].bincount(vocab_size))
        for split, (tokens, offsets) in caches.items():
            if len(tokens) < self.block_size:
                raise ArmlmError(
                    f"the {split} split of {self.corpus.describe()} has {len(tokens)} tokens, fewer than one "
                    f"block of data.block_size={self.block_size}; use a smaller block size or more text"
                    + (" (or a larger data.corpus.val_fraction)" if split == "validation" else "")
                )
            if self.input_format == "blocks":
                self.datasets[split] = PackedBlocks(tokens, self.block_size, self.vocabulary,
                                                    documents=not self.cross_document_attention)
            else:
                self.datasets[split] = SegmentPairs(tokens, offsets, self.block_size, self.vocabulary, self.seed)
        if len(self.datasets["train"]) < self.batch_size:
            raise ArmlmError(
                f"the train split of {self.corpus.describe()} makes {len(self.datasets['train'])} examples, fewer "
                f"than one batch of data.batch_size={self.batch_size}; use a smaller batch or more text"
            )
        self.unigram_baseline = self.vocabulary.unigram_nll_of_counts(caches["validation"][0].bincount(vocab_size))

    def epoch_positions(self, world_size: int = 1) -> int:
        """Input positions one pass over the training examples feeds (all ranks), in full batches as the loaders
        give them (packed blocks carry a [CLS] each, ranks pad to equal shares and each drops its last partial
        batch, so it differs from train_tokens a little): tokens seen over this is the number of epochs."""
        return rank_batches(len(self.datasets["train"]), self.batch_size, world_size) * self.batch_size * world_size \
            * self.block_size

    def block_words(self) -> np.ndarray:
        """The whitespace words each training example opens (BabyLM's count: datamodules.words), built once per
        token cache; packed blocks only."""
        if self.tokenizer is None or self.train_tokens is None:
            raise RuntimeError("call setup() first")
        if self.input_format != "blocks":
            raise ArmlmError("words per example are counted for packed blocks only, not segment pairs")
        folder = self.cache_paths().splits["train"]
        tokens, _ = read_shards(folder)
        flags = word_starts(folder, self.tokenizer, self.corpus.documents("train"), tokens)
        return block_words(flags[: self.train_tokens], self.block_size - 1)

    @property
    def tokenizer_json(self) -> str:
        if self.tokenizer is None:
            raise RuntimeError("call setup() first")
        return self.tokenizer.to_str()

    def train_dataloader(self) -> DataLoader:
        # One seeded permutation, split across ranks by DistributedSampler even in a single process (which
        # Lightning then leaves alone): the examples of global step s are the same for any number of
        # processes, so a 2-rank run matches a 1-rank run with twice the per-rank batch.
        trainer = getattr(self, "trainer", None)
        world, rank = (trainer.world_size, trainer.global_rank) if trainer is not None else (1, 0)
        sampler = ResumableSampler(self.datasets["train"], num_replicas=world, rank=rank, seed=self.seed)
        # After a resume, the epoch in progress continues after the batches the checkpoint had trained on.
        if self.resume_position is not None:
            sampler.resume_at(self.resume_position["epoch"], self.resume_position["batches"] * self.batch_size)
        # Full batches only: every step then feeds exactly batch_size x block_size tokens to any objective.
        return DataLoader(self.datasets["train"], batch_size=self.batch_size, sampler=sampler, drop_last=True,
                          num_workers=self.num_workers, persistent_workers=self.num_workers > 0,
                          pin_memory=self.pin_memory)

    def use_loaders(self, *, workers: int, pin_memory: bool) -> None:
        """How the loaders run, the trainer's choice (trainer.step): worker processes and page-locked batches."""
        self.num_workers, self.pin_memory = int(workers), bool(pin_memory)

    def trained_through(self, epoch: int, batches: int) -> None:
        self.position = {"epoch": int(epoch), "batches": int(batches)}

    def state_dict(self) -> dict[str, int]:
        return dict(self.position or {})

    def load_state_dict(self, state_dict: dict[str, int]) -> None:
        """Lightning restores this before it asks for the train loader, so the sampler can skip what was done."""
        if state_dict:
            self.position = self.resume_position = {"epoch": int(state_dict["epoch"]),
                                                    "batches": int(state_dict["batches"])}

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.datasets["validation"], batch_size=self.val_batch_size, shuffle=False,
                          num_workers=self.num_workers, persistent_workers=self.num_workers > 0,
                          pin_memory=self.pin_memory)
