"""The sharded token cache: shards equal the one-shot encoding, a kill mid-encode resumes without re-encoding
finished shards, reading is one stream across shard boundaries, and DDP ranks read disjoint parts of it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from filelock import FileLock

from armlm.common.vocabulary import EOD
from armlm.datamodules.corpora import EmbeddedWikipedia
from armlm.datamodules.sampler import ResumableSampler
from armlm.datamodules.shards import LOCK, MANIFEST, PLAN, encode_to_shards, read_shards, shard_paths, split_words
from armlm.datamodules.tokenizer import TokenizerSettings, tokenizer_sample, train_tokenizer
from tests.helpers.configs import REPO


@pytest.fixture(scope="module")
def documents() -> list[str]:
    return [text for _, text in EmbeddedWikipedia().read_documents()[:60]]


@pytest.fixture(scope="module")
def tokenizer(documents):
    return train_tokenizer(documents, TokenizerSettings(vocab_size=800))


def one_shot(tokenizer, documents: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """The reference: every document encoded in one call of the plain encode_batch (the cache calls
    encode_batch_fast), [EOD] after each, empty ones dropped."""
    eod = tokenizer.token_to_id(EOD)
    ids = [enc.ids + [eod] for enc in tokenizer.encode_batch(documents, add_special_tokens=False) if enc.ids]
    return np.concatenate([np.asarray(i) for i in ids]), np.concatenate([[0], np.cumsum([len(i) for i in ids])])


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_shards_equal_the_one_shot_encoding(tmp_path, tokenizer, documents, workers):
    docs = [*documents[:5], "", "   ", *documents[5:]]  # empty documents are dropped, as before
    report = encode_to_shards(tokenizer, iter(docs), tmp_path, workers=workers, shard_chars=200_000)
    assert report.shards > 3 and report.encoded == report.shards
    tokens, offsets = read_shards(tmp_path)
    expected_tokens, expected_offsets = one_shot(tokenizer, docs)
    assert len(tokens) == report.tokens == len(expected_tokens)
    assert np.array_equal(np.asarray(tokens), expected_tokens) and np.array_equal(offsets, expected_offsets)
    # Slices across shard boundaries read the stream as one array.
    for start in (0, int(tokens.starts[1]) - 3, int(tokens.starts[2]) - 1, len(tokens) - 5):
        assert np.array_equal(tokens[start:start + 7], expected_tokens[start:start + 7])
    assert tokens[int(tokens.starts[1])] == expected_tokens[int(tokens.starts[1])]
    assert np.array_equal(tokens.bincount(800), np.bincount(expected_tokens, minlength=800))
    assert np.array_equal(np.asarray(tokens.head(1000)), expected_tokens[:1000])
    assert split_words(tmp_path) == sum(len(d.split()) for d in docs)  # whitespace words, as BabyLM counts


def test_a_second_call_on_a_complete_folder_encodes_nothing(tmp_path, tokenizer, documents):
    encode_to_shards(tokenizer, iter(documents), tmp_path, shard_chars=300_000)
    again = encode_to_shards(tokenizer, iter(["never read"]), tmp_path, shard_chars=300_000)
    assert again.encoded == 0 and again.tokens == len(read_shards(tmp_path)[0])


KILLED_ENCODE = """
import sys, time
from pathlib import Path
from tokenizers import Tokenizer
from armlm.datamodules import shards
from armlm.datamodules.corpora import EmbeddedWikipedia

real = shards.encode_shard
def slow(*args):
    time.sleep(0.4)  # time for the test to kill the process part-way
    return real(*args)
shards.encode_shard = slow
docs = [text for _, text in EmbeddedWikipedia().read_documents()[:60]]
shards.encode_to_shards(Tokenizer.from_file(sys.argv[1]), iter(docs), Path(sys.argv[2]), shard_chars=200_000,
                        workers=int(sys.argv[3]))
"""


def children_of(pid: int) -> list[int]:
    return [int(c) for path in Path(f"/proc/{pid}/task").glob("*/children") for c in path.read_text().split()]


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_a_killed_encode_resumes_without_re_encoding_finished_shards(tmp_path, tokenizer, documents, workers):
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    folder = tmp_path / "train"
    process = subprocess.Popen([sys.executable, "-c", KILLED_ENCODE, str(tmp_path / "tokenizer.json"), str(folder),
                                str(workers)], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    deadline = time.time() + 120
    while not shard_paths(folder, 1)[0].is_file() and time.time() < deadline:
        time.sleep(0.05)
    orphans = children_of(process.pid) if workers > 1 else []
    process.send_signal(signal.SIGKILL)
    process.wait()
    deadline = time.time() + 10  # the workers notice their parent is gone and exit
    while any(Path(f"/proc/{pid}").exists() and "zombie" not in Path(f"/proc/{pid}/status").read_text()
              for pid in orphans) and time.time() < deadline:
        time.sleep(0.2)
    assert not [pid for pid in orphans if Path(f"/proc/{pid}").exists()
                and "zombie" not in Path(f"/proc/{pid}/status").read_text()], "workers outlived the killed encoder"
    finished = sorted(folder.glob("shard-*.tokens.npy"))
    assert len(finished) >= 2 and not (folder / MANIFEST).exists()
    stamps = {p: p.stat().st_mtime_ns for p in finished}
    report = encode_to_shards(tokenizer, iter(documents), folder, shard_chars=200_000)
    assert report.encoded == report.shards - len(finished)  # the finished shards were kept, not re-encoded
    assert all(p.stat().st_mtime_ns == stamps[p] for p in finished)
    assert split_words(folder) == sum(len(d.split()) for d in documents)  # the kept shards' words are counted too
    assert not list(folder.glob(".*tmp*"))  # no temporary file is left behind, or read
    tokens, offsets = read_shards(folder)
    expected_tokens, expected_offsets = one_shot(tokenizer, documents)
    assert np.array_equal(np.asarray(tokens), expected_tokens) and np.array_equal(offsets, expected_offsets)


@pytest.mark.slow
def test_a_run_waits_for_another_encoding_the_folder_then_reads_its_shards(tmp_path, tokenizer, documents):
    done, shared = tmp_path / "done", tmp_path / "shared"
    encode_to_shards(tokenizer, iter(documents), done, shard_chars=300_000)
    shared.mkdir()
    in_flight = shared / ".shard-00000.tokens.npy.tmp-1-abcdef01"  # the other run's file being written
    in_flight.write_bytes(b"half")
    reports, documents_read = [], []

    def corpus():
        for text in documents:
            documents_read.append(text)
            yield text

    with FileLock(shared / LOCK):  # the other run holds the folder
        waiter = threading.Thread(target=lambda: reports.append(
            encode_to_shards(tokenizer, corpus(), shared, shard_chars=300_000)))
        waiter.start()
        waiter.join(timeout=1.0)
        # Still waiting: it neither swept the other run's temporary file nor wrote a plan of its own.
        assert waiter.is_alive() and in_flight.is_file() and not (shared / PLAN).exists()
        in_flight.unlink()
        for path in done.iterdir():  # the other run finishes
            if path.name != LOCK:
                shutil.copy(path, shared / path.name)
    waiter.join(timeout=60)
    assert not waiter.is_alive(), "still waiting after the lock was released"
    (report,) = reports
    assert report.encoded == 0 and report.tokens == len(read_shards(done)[0])
    assert documents_read == [], "the waiter re-read the corpus instead of taking the finished folder"


def test_an_empty_split_leaves_no_manifest_and_keeps_the_lock(tmp_path, tokenizer):
    report = encode_to_shards(tokenizer, iter([]), tmp_path, shard_chars=300_000)
    assert report.tokens == 0
    assert [p.name for p in tmp_path.iterdir()] == [LOCK]  # not complete, and the lock a waiting run holds stays


def test_a_resume_with_other_shard_settings_is_refused(tmp_path, tokenizer, documents):
    encode_to_shards(tokenizer, iter(documents), tmp_path, shard_chars=200_000)
    (tmp_path / MANIFEST).unlink()  # as if killed before the end
    with pytest.raises(ValueError, match="shard_chars=200000"):
        encode_to_shards(tokenizer, iter(documents), tmp_path, shard_chars=100_000)
    assert encode_to_shards(tokenizer, iter(documents), tmp_path, shard_chars=200_000).encoded == 0


def test_an_unfinished_or_foreign_folder_is_refused_with_the_fix(tmp_path, tokenizer, documents):
    with pytest.raises(FileNotFoundError, match="did not finish"):
        read_shards(tmp_path)
    encode_to_shards(tokenizer, iter(documents), tmp_path, shard_chars=500_000)
    manifest = json.loads((tmp_path / MANIFEST).read_text())
    (tmp_path / MANIFEST).write_text(json.dumps({**manifest, "shard_tokens": [1] * len(manifest["shard_tokens"])}))
    with pytest.raises(ValueError, match="delete"):
        read_shards(tmp_path)


def test_two_ranks_read_disjoint_parts_of_the_stream(tmp_path, tokenizer, documents):
    from armlm.common.vocabulary import Vocabulary
    from armlm.datamodules.blocks import PackedBlocks

    encode_to_shards(tokenizer, iter(documents), tmp_path, shard_chars=200_000)
    tokens, _ = read_shards(tmp_path)
    vocab = Vocabulary(800, 0, 1, 2, 3, 4, 5, unigram_counts=np.ones(800, dtype=np.int64))
    blocks = PackedBlocks(tokens, 64, vocab)
    ranks = [list(ResumableSampler(blocks, num_replicas=2, rank=r, seed=3)) for r in (0, 1)]
    assert not set(ranks[0]) & set(ranks[1]) and len(ranks[0]) == len(ranks[1]) == len(blocks) // 2
    # Every block is the stream's tokens at its place, across shard boundaries too.
    flat = np.asarray(tokens)
    for i in (0, int(tokens.starts[1]) // 63, len(blocks) - 1):
        assert np.array_equal(blocks[i]["input_ids"][1:].numpy(), flat[i * 63:(i + 1) * 63])


def test_the_tokenizer_sample_is_bounded_seeded_and_spread(documents):
    sample = tokenizer_sample(iter(documents), max_chars=50_000, seed=0)
    assert sum(len(piece) for piece in sample) <= 50_000
    assert sample == tokenizer_sample(iter(documents), max_chars=50_000, seed=0)
    assert sample != tokenizer_sample(iter(documents), max_chars=50_000, seed=1)
    # Drawn from the whole stream, not its head: some piece comes from the last third of the documents.
    tail = "".join(documents[40:])
    assert any(piece in tail for piece in sample)


@pytest.mark.slow
def test_a_streaming_corpus_through_the_datamodule_does_not_depend_on_workers_or_shards(tmp_path, documents):
    from armlm.datamodules.corpora import TextFiles
    from armlm.datamodules.pretrain import PretrainDataModule

    (tmp_path / "corpus.txt").write_text("\n\n".join(p for doc in documents for p in doc.split("\n\n") if p.strip()))
    corpus = TextFiles([str(tmp_path / "corpus.txt")], blank_line_documents=True, streaming=True)
    tokenizer = {"vocab_size": 700, "sample_chars": 400_000}
    one = PretrainDataModule(corpus, tokenizer, cache_dir=str(tmp_path / "a"), block_size=32, batch_size=4)
    many = PretrainDataModule(corpus, tokenizer, cache_dir=str(tmp_path / "b"), block_size=32, batch_size=4,
                              encode_workers=2, shard_chars=150_000)
    one.setup("fit")
    # The same tokenizer (WordPiece training on a small sample can break frequency ties either way: the
    # tokenizer is trained once per cache and shared), then encoded by 2 workers in small shards.
    shutil.copytree(one.cache_paths().tokenizer, many.cache_paths().tokenizer)
    many.setup("fit")
    assert len(list((tmp_path / "b").rglob("shard-*.tokens.npy"))) > 4
    for split in ("train", "validation"):
        assert np.array_equal(np.asarray(one.datasets[split].tokens), np.asarray(many.datasets[split].tokens))
    assert one.unigram_baseline == pytest.approx(many.unigram_baseline, rel=1e-12)
    # The sample is part of the cache key; a tokenizer trained on everything keeps its old key.
    assert "sample_chars" not in TokenizerSettings().to_dict()
    assert one.cache_paths().tokenizer != PretrainDataModule(corpus, {"vocab_size": 700},
                                                             cache_dir=str(tmp_path / "a")).cache_paths().tokenizer
    with pytest.raises(ValueError, match="sample_chars"):
        TokenizerSettings(sample_chars=10)
