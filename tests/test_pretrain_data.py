from pathlib import Path

import numpy as np
import pytest
import torch

import armlm.datamodules.pretrain as pretrain
import armlm.datamodules.shards as shards
from armlm.common.vocabulary import SPECIAL_TOKENS
from armlm.datamodules.corpora import TextFiles
from armlm.datamodules.pretrain import PretrainDataModule

WORDS = ("the of and to in is was for on that with as by at from his an were are which this be "
         "river city music war language king church team system science history island battle").split()


def write_corpus(folder: Path, n_docs: int = 40, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for d in range(n_docs):
        sentences = [" ".join(rng.choice(WORDS, rng.integers(5, 15))).capitalize() + "." for _ in range(20)]
        (folder / f"doc{d:03d}.txt").write_text(" ".join(sentences))
    return folder


def datamodule(folder: Path, cache: Path, **kw) -> PretrainDataModule:
    kw.setdefault("block_size", 32)
    kw.setdefault("batch_size", 4)
    return PretrainDataModule(TextFiles([str(folder)], val_fraction=0.1), {"vocab_size": 120, "min_frequency": 1},
                              cache_dir=str(cache), **kw)


def test_tokenizer_round_trip_and_fixed_special_ids(tmp_path):
    dm = datamodule(write_corpus(tmp_path / "c"), tmp_path / "cache")
    dm.setup()
    assert [dm.tokenizer.token_to_id(t) for t in SPECIAL_TOKENS] == [0, 1, 2, 3, 4, 5]
    text = "the river city was at war with the island."
    ids = dm.tokenizer.encode(text, add_special_tokens=False).ids
    assert dm.tokenizer.decode(ids) == text
    assert dm.vocabulary.size == dm.tokenizer.get_vocab_size() <= 120
    assert dm.vocabulary.unigram_counts.sum() == len(dm.datasets["train"].tokens)
    assert 0 < dm.unigram_baseline < np.log(120)


def test_byte_level_bpe_round_trips_exactly(tmp_path):
    folder = write_corpus(tmp_path / "c")
    dm = PretrainDataModule(TextFiles([str(folder)], val_fraction=0.1),
                            {"vocab_size": 400, "min_frequency": 1, "kind": "byte_bpe", "lowercase": False},
                            cache_dir=str(tmp_path / "cache"), block_size=32)
    dm.setup()
    assert [dm.tokenizer.token_to_id(t) for t in SPECIAL_TOKENS] == [0, 1, 2, 3, 4, 5]
    text = "The River  city, café № 7 — unseen wörds!"
    assert dm.tokenizer.decode(dm.tokenizer.encode(text, add_special_tokens=False).ids) == text
    assert dm.cache_paths().tokenizer.parent.name.startswith("byte_bpe-")


def test_second_run_reuses_the_caches_without_retokenizing(tmp_path, monkeypatch):
    corpus = write_corpus(tmp_path / "c")
    first = datamodule(corpus, tmp_path / "cache")
    first.setup()
    paths = first.cache_paths()
    stamps = {p: p.stat().st_mtime_ns for p in paths.tokenizer.parent.rglob("*") if p.is_file()}

    def forbidden(*args, **kwargs):
        raise AssertionError("the cache should have been reused")

    monkeypatch.setattr(pretrain, "train_tokenizer", forbidden)
    monkeypatch.setattr(shards, "encode_shard", forbidden)
    monkeypatch.setattr(TextFiles, "load", forbidden)
    second = datamodule(corpus, tmp_path / "cache")
    second.setup()
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    assert np.array_equal(second.datasets["train"].tokens, first.datasets["train"].tokens)
    # A different input format reads the same cache too (MLM+NSP and AR share the tokenizer file).
    datamodule(corpus, tmp_path / "cache", input_format="segment_pairs").setup()


def test_changed_tokenizer_settings_get_their_own_cache(tmp_path):
    corpus = write_corpus(tmp_path / "c")
    a = datamodule(corpus, tmp_path / "cache")
    b = PretrainDataModule(TextFiles([str(corpus)], val_fraction=0.1), {"vocab_size": 100, "min_frequency": 1},
                           cache_dir=str(tmp_path / "cache"))
    assert a.cache_paths().tokenizer != b.cache_paths().tokenizer


def test_a_vocabulary_size_change_builds_its_own_tokenizer_and_tokens(tmp_path):
    corpus = write_corpus(tmp_path / "c")
    small = datamodule(corpus, tmp_path / "cache")
    small.setup()
    stamps = {p: p.stat().st_mtime_ns for p in (tmp_path / "cache").rglob("*") if p.is_file()}
    larger = PretrainDataModule(TextFiles([str(corpus)], val_fraction=0.1), {"vocab_size": 160, "min_frequency": 1},
                                cache_dir=str(tmp_path / "cache"), block_size=32, batch_size=4)
    larger.setup()
    assert larger.tokenizer.get_vocab_size() > small.tokenizer.get_vocab_size()
    assert int(np.asarray(larger.datasets["train"].tokens).max()) >= small.tokenizer.get_vocab_size()  # new ids
    assert larger.train_tokens < small.train_tokens  # a larger vocabulary cuts the same text into fewer tokens
    assert larger.train_words == small.train_words  # the same words either way
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps  # the first cache is kept as it was


def test_interrupted_cache_write_leaves_no_corrupt_cache(tmp_path, monkeypatch):
    corpus = write_corpus(tmp_path / "c")
    real_save = np.save
    calls = []

    def crash_on_second_file(file, array):
        calls.append(file)
        if len(calls) == 2:  # the first shard's offsets written, its tokens not
            raise KeyboardInterrupt("simulated Ctrl-C in the middle of a cache write")
        real_save(file, array)

    monkeypatch.setattr(shards.np, "save", crash_on_second_file)
    dm = datamodule(corpus, tmp_path / "cache")
    with pytest.raises(KeyboardInterrupt):
        dm.prepare_data()
    monkeypatch.undo()
    paths = dm.cache_paths()
    assert (paths.tokenizer / "tokenizer.json").is_file()  # finished before the crash, kept
    assert not (paths.splits["train"] / shards.MANIFEST).exists() and not paths.complete()
    assert not list(paths.splits["train"].glob("shard-*.tokens.npy"))  # the shard did not finish, so it is not there
    leftovers = [p for p in paths.tokenizer.parent.rglob("*") if ".tmp-" in p.name]
    assert leftovers == []
    fresh = datamodule(corpus, tmp_path / "cache")
    fresh.setup()  # rebuilds the missing split and reads back a valid cache
    assert len(fresh.datasets["train"]) > 0


def test_corpus_smaller_than_one_block_is_rejected(tmp_path):
    folder = tmp_path / "small"
    write_corpus(folder, n_docs=4)
    dm = datamodule(folder, tmp_path / "cache", block_size=512)
    with pytest.raises(ValueError, match="fewer than one block"):
        dm.setup()


def test_empty_corpus_is_rejected_before_training_a_tokenizer(tmp_path, monkeypatch):
    folder = tmp_path / "empty"
    folder.mkdir()
    (folder / "a.txt").write_text("\n\n")
    monkeypatch.setattr(pretrain, "train_tokenizer", lambda *a: pytest.fail("tokenizer trained on nothing"))
    with pytest.raises(ValueError, match="no non-empty documents"):
        datamodule(folder, tmp_path / "cache").prepare_data()
    assert not any((tmp_path / "cache").rglob("tokenizer.json"))


def test_ranks_split_each_global_batch_and_match_one_process(tmp_path):
    """The examples of a step depend on the seed only: two ranks with batch b see disjoint halves of
    exactly the batch one process with batch 2b sees."""
    from types import SimpleNamespace

    corpus = write_corpus(tmp_path / "corpus")

    def first_batches(world: int, batch_size: int) -> list[set[tuple[int, ...]]]:
        out = []
        for rank in range(world):
            dm = datamodule(corpus, tmp_path / "cache", batch_size=batch_size)
            dm.setup("fit")
            dm.trainer = SimpleNamespace(world_size=world, global_rank=rank)
            loader = dm.train_dataloader()
            loader.sampler.set_epoch(1)
            out.append({tuple(row.tolist()) for row in next(iter(loader))["input_ids"]})
        return out

    rank0, rank1 = first_batches(2, 4)
    (single,) = first_batches(1, 8)
    assert len(rank0) == len(rank1) == 4 and not rank0 & rank1
    assert rank0 | rank1 == single


def test_the_data_position_is_the_datamodules_state_and_a_restored_one_skips_what_was_trained(tmp_path):
    corpus = write_corpus(tmp_path / "c")
    trained = datamodule(corpus, tmp_path / "cache", seed=3)
    trained.setup()
    assert trained.state_dict() == {}  # nothing trained yet: Lightning then stores no DataModule state
    full_epoch = [batch["input_ids"] for batch in trained.train_dataloader()]
    trained.trained_through(epoch=0, batches=5)
    state = trained.state_dict()
    assert state == {"epoch": 0, "batches": 5}

    resumed = datamodule(corpus, tmp_path / "cache", seed=3)
    resumed.setup()
    resumed.load_state_dict(state)
    rest = [batch["input_ids"] for batch in resumed.train_dataloader()]
    assert len(rest) == len(full_epoch) - 5
    assert all((a == b).all() for a, b in zip(rest, full_epoch[5:]))
    assert resumed.state_dict() == state  # a checkpoint written before the next step keeps the position


def test_max_train_tokens_trains_on_the_first_tokens_only_and_counts_an_epoch(tmp_path):
    corpus = write_corpus(tmp_path / "corpus")
    whole = datamodule(corpus, tmp_path / "cache", block_size=16)
    whole.setup("fit")
    sliced = datamodule(corpus, tmp_path / "cache", block_size=16, max_train_tokens=200)
    sliced.setup("fit")
    assert sliced.train_tokens == 200 < whole.train_tokens
    words = sum(len(d.split()) for d in TextFiles([str(corpus)], val_fraction=0.1).documents("train"))
    assert whole.train_words == words and sliced.train_words == pytest.approx(words * 200 / whole.train_tokens)
    assert sliced.tokenizer_json == whole.tokenizer_json  # the whole split's tokenizer: slices share it
    assert len(sliced.datasets["validation"]) == len(whole.datasets["validation"])  # validation untouched
    first = [sliced.datasets["train"][i]["input_ids"] for i in range(len(sliced.datasets["train"]))]
    assert all(torch.equal(a, whole.datasets["train"][i]["input_ids"]) for i, a in enumerate(first))
    # 200 tokens: 13 blocks of [CLS] + 15, 3 full batches of 4 per epoch (the 13th block is dropped)
    assert len(first) == 13 and sliced.epoch_positions() == 3 * 4 * 16 and sliced.epoch_positions(2) == 1 * 8 * 16
    # 4 ranks: the sampler pads 13 blocks to 4 a rank, so each rank's loader still gives one full batch
    assert sliced.epoch_positions(4) == 1 * 4 * 4 * 16
    with pytest.raises(ValueError, match="data.max_train_tokens=8: give a number of tokens >= data.block_size"):
        datamodule(corpus, tmp_path / "cache", block_size=16, max_train_tokens=8)
    with pytest.raises(ValueError, match="but the train split .* has"):
        datamodule(corpus, tmp_path / "cache", max_train_tokens=10**9).setup("fit")
    with pytest.raises(ValueError, match="pairs documents"):
        datamodule(corpus, tmp_path / "cache", max_train_tokens=200, input_format="segment_pairs")
