"""The token cache in shards: encoded by worker processes as the documents stream by, read back as one stream.

Writing (`encode_to_shards`): documents are cut into shards of about `shard_chars` characters, in corpus order (a
cut falls between documents, at the same places in every run), and a pool of worker processes encodes them, each
shard written atomically by its worker (`shard-NNNNN.tokens.npy` with `[EOD]` after every document, and its
document offsets). The parent holds at most `2 x workers` shards of text, so memory does not grow with the corpus.
A run killed part-way keeps its finished shards: the next one re-reads the corpus past them without encoding them
again. `manifest.json`, written last, marks the split complete and counts its tokens and whitespace words. A file
lock keeps two runs sharing a cache from encoding one folder at once: the second waits and then reads the first
one's shards.

Reading (`read_shards`): a complete split's shards checked against its manifest and memory-mapped as one
`ShardedTokens` stream.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import resource
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_all_start_methods, get_context
from pathlib import Path

import numpy as np
from filelock import FileLock, Timeout
from tokenizers import Tokenizer
from tqdm.auto import tqdm

from armlm.common.atomic import atomic_write_text
from armlm.common.errors import ArmlmError, ArmlmFileError
from armlm.datamodules.sharded_tokens import ShardedTokens
from armlm.datamodules.tokenizer import encode_documents

MANIFEST = "manifest.json"
PLAN = "plan.json"  # how the shards are cut and encoded, written first: a resume must match it
LOCK = ".encode.lock"  # held while a run encodes the folder
LAYOUT = 1  # bumped when the files' layout changes, so old caches are rebuilt rather than misread
log = logging.getLogger(__name__)


def shard_paths(folder: Path, index: int) -> tuple[Path, Path]:
    return folder / f"shard-{index:05d}.tokens.npy", folder / f"shard-{index:05d}.offsets.npy"


def cut_into_shards(documents: Iterable[str], shard_chars: int) -> Iterator[list[str]]:
    """Consecutive documents, in order, grouped until a group holds at least `shard_chars` characters."""
    group: list[str] = []
    size = 0
    for text in documents:
        group.append(text)
        size += len(text)
        if size >= shard_chars:
            yield group
            group, size = [], 0
    if group:
        yield group


# Fork where there is one, as torch's DataLoader does: a worker starts at once, shares the parent's pages until it
# writes them, and does not re-import the parent's main module (spawn would run train.py's imports again, seconds
# and hundreds of MB per worker). Workers touch neither torch nor the parent's threads.
START_METHOD = "fork" if "fork" in get_all_start_methods() else "spawn"
_worker_tokenizer: Tokenizer | None = None


def _start_worker(tokenizer_json: str) -> None:
    global _worker_tokenizer
    # The processes are the parallelism: one thread each (tokenizers' own pool would oversubscribe the cores and
    # hold a memory arena per thread).
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    _worker_tokenizer = Tokenizer.from_str(tokenizer_json)
    parent = os.getppid()

    def exit_with_parent() -> None:  # a killed encoder must not leave its workers behind
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=exit_with_parent, daemon=True).start()


def encode_shard(tokenizer: Tokenizer, documents: list[str], tokens_path: Path, offsets_path: Path) -> int:
    """Encode one shard and write it atomically (each file through a temporary sibling); returns its tokens.
    Empty documents are dropped, as the one-shot encoding always did."""
    tokens, offsets = encode_documents(tokenizer, documents, progress=False)
    # Offsets first: a shard counts as finished once its tokens file exists.
    for path, array in ((offsets_path, offsets), (tokens_path, tokens)):
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        try:
            with open(tmp, "wb") as f:
                np.save(f, array)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
    return len(tokens)


def check_encode_settings(workers: int, shard_chars: int) -> None:
    for name, value in (("data.encode_workers", workers), ("data.shard_chars", shard_chars)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ArmlmError(f"{name}={value!r} must be an integer >= 1")


def _encode_in_worker(documents: list[str], tokens_path: Path, offsets_path: Path) -> int:
    assert _worker_tokenizer is not None
    return encode_shard(_worker_tokenizer, documents, tokens_path, offsets_path)


@dataclass(frozen=True)
class EncodeReport:
    shards: int
    encoded: int  # shards encoded by this call (the rest were kept from an earlier, interrupted one)
    tokens: int


def _finished(folder: Path) -> EncodeReport | None:
    """The report of a folder whose manifest says it is complete (nothing encoded now), or None."""
    if not (folder / MANIFEST).is_file():
        return None
    shard_tokens = json.loads((folder / MANIFEST).read_text())["shard_tokens"]
    return EncodeReport(len(shard_tokens), 0, sum(shard_tokens))


def encode_to_shards(tokenizer: Tokenizer, documents: Iterable[str], folder: Path, *, workers: int = 1,
                     shard_chars: int = 8_000_000, desc: str = "") -> EncodeReport:
    """Encode `documents` into `folder` (see the module docstring). `workers` > 1 encodes in that many processes;
    1 encodes in this one. A folder with a manifest is complete and left alone."""
    if (finished := _finished(folder)) is not None:  # no lock needed: the manifest is written last
        return finished
    check_encode_settings(workers, shard_chars)
    folder.mkdir(parents=True, exist_ok=True)
    # One writer per folder: a second run sharing the cache waits, then finds the manifest. Without the lock its
    # sweep of stale temporary files below would delete the first run's files in flight.
    lock = FileLock(folder / LOCK)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        log.info("waiting for another run that is encoding %s", folder)
        lock.acquire()
    try:
        return _encode_holding_the_lock(tokenizer, documents, folder, workers, shard_chars, desc)
    finally:
        lock.release()


def _encode_holding_the_lock(tokenizer: Tokenizer, documents: Iterable[str], folder: Path, workers: int,
                             shard_chars: int, desc: str) -> EncodeReport:
    if (finished := _finished(folder)) is not None:  # finished by the run we waited for
        return finished
    plan = {"layout": LAYOUT, "shard_chars": shard_chars,
            "tokenizer": hashlib.sha256(tokenizer.to_str().encode()).hexdigest()[:16]}
    if (folder / PLAN).is_file():
        earlier = json.loads((folder / PLAN).read_text())
        if earlier != plan:
            raise ArmlmError(f"{folder} holds shards of an interrupted encode cut or encoded otherwise ({earlier}, now "
                             f"{plan}); resume with data.shard_chars={earlier.get('shard_chars')}, or delete the folder "
                             "to start it afresh")
    else:
        atomic_write_text(folder / PLAN, json.dumps(plan))
    for stale in folder.glob(".*.tmp-*"):  # a killed writer's half-written temporary file
        stale.unlink(missing_ok=True)
    counts: dict[int, int] = {}
    encoded = words = 0
    bar = tqdm(desc=f"encoding {desc}", unit="shard")
    pool = (ProcessPoolExecutor(workers, mp_context=get_context(START_METHOD), initializer=_start_worker,
                                initargs=(tokenizer.to_str(),)) if workers > 1 else None)
    pending: dict[int, Future] = {}
    try:
        for index, shard in enumerate(cut_into_shards(documents, shard_chars)):
            words += sum(len(text.split()) for text in shard)  # every document passes here, kept shards too
            tokens_path, offsets_path = shard_paths(folder, index)
            if tokens_path.is_file() and offsets_path.is_file():  # finished by an earlier run: keep it
                counts[index] = int(np.load(tokens_path, mmap_mode="r").shape[0])
                bar.update()
                continue
            encoded += 1
            if pool is None:
                counts[index] = encode_shard(tokenizer, shard, tokens_path, offsets_path)
                bar.update()
                continue
            pending[index] = pool.submit(_encode_in_worker, shard, tokens_path, offsets_path)
            while len(pending) >= 2 * workers:  # bounded text in flight
                first = min(pending)
                counts[first] = pending.pop(first).result()
                bar.update()
        for index in sorted(pending):
            counts[index] = pending.pop(index).result()
            bar.update()
    finally:
        bar.close()
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    shard_tokens = [counts[i] for i in range(len(counts))]
    if sum(shard_tokens) == 0:  # nothing to train on: no manifest, so no later run takes the folder as complete
        for path in folder.iterdir():
            if path.name != LOCK:  # the lock stays: a run waiting on it must not lock a new file beside it
                path.unlink()
        return EncodeReport(len(shard_tokens), encoded, 0)
    atomic_write_text(folder / MANIFEST, json.dumps({"layout": LAYOUT, "shard_tokens": shard_tokens, "words": words}))
    return EncodeReport(len(shard_tokens), encoded, sum(shard_tokens))


def allow_open_files(shards: int) -> None:
    """Each mapped shard holds a file descriptor: raise the soft limit (up to the hard one) when a split's shards
    would not fit beside the process's other files (1,024 is a common soft limit; 8M-character shards make
    about 500 per billion tokens)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = shards * 2 + 1024  # train and validation, and room for everything else
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted if hard == resource.RLIM_INFINITY else min(wanted, hard), hard))


def split_words(folder: Path) -> int | None:
    """The whitespace-separated words of a complete split's text (as BabyLM counts a budget); None for a cache
    written before the manifest kept them."""
    return json.loads((folder / MANIFEST).read_text()).get("words")


def read_shards(folder: Path) -> tuple[ShardedTokens, np.ndarray]:
    """A complete split: its tokens as one ShardedTokens, and the document offsets into that stream."""
    manifest_path = folder / MANIFEST
    if not manifest_path.is_file():
        raise ArmlmFileError(f"{folder} has no {MANIFEST}: its encoding did not finish; run again to complete it")
    manifest = json.loads(manifest_path.read_text())
    if manifest.get("layout") != LAYOUT:
        raise ArmlmError(f"{folder} was written in cache layout {manifest.get('layout')}, this armlm reads "
                         f"{LAYOUT}; delete the folder to rebuild it")
    allow_open_files(len(manifest["shard_tokens"]))
    parts, offsets, base = [], [np.zeros(1, dtype=np.int64)], 0
    for index, expected in enumerate(manifest["shard_tokens"]):
        tokens_path, offsets_path = shard_paths(folder, index)
        tokens = np.load(tokens_path, mmap_mode="r")
        if len(tokens) != expected:
            raise ArmlmError(f"{tokens_path} holds {len(tokens)} tokens, the manifest {expected}; delete {folder} "
                             "to rebuild it")
        shard_offsets = np.load(offsets_path)
        if shard_offsets[-1] != len(tokens):
            raise ArmlmError(f"{offsets_path} ends at {shard_offsets[-1]}, its shard holds {len(tokens)} tokens; delete "
                             f"{folder} to rebuild it")
        parts.append(tokens)
        offsets.append(shard_offsets[1:] + base)
        base += len(tokens)
    return ShardedTokens(parts), np.concatenate(offsets)
