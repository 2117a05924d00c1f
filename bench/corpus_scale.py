"""The data path at corpus scale: encode a generated text corpus of N tokens into the sharded cache, streaming, with
worker processes, and report tokens/s, peak memory and cache size at N and 2N (memory must not grow with N).

    python bench/corpus_scale.py                          # 200M and 400M tokens, 2 workers (about 15 minutes)
    python bench/corpus_scale.py --tokens 20_000_000 --workers 2

The corpus repeats the embedded Wikipedia's paragraphs (numbered, so no two documents are equal) into 64 MB files
under a temporary folder. Each size runs in a fresh process: `data=text data.corpus.streaming=true`, the tokenizer
trained on a seeded 20M-character sample, then every split encoded (`PretrainDataModule.prepare_data`); tokens/s is
over all of that. Peak memory is the largest sum, while encoding, of the encoding process's and its workers'
anonymous proportional set size (Pss_Anon, sampled from /proc every 50 ms): what they hold themselves, a page shared
by forked workers counted once, file pages (the page cache of the corpus and the shards, which the kernel reclaims)
left out. A worker's ru_maxrss would count the parent's pages it was forked with.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from armlm.datamodules.corpora import EmbeddedWikipedia  # noqa: E402

FILE_BYTES = 64 << 20

ENCODE = """
import glob, json, os, sys, threading, time
from armlm.datamodules.corpora import TextFiles
from armlm.datamodules.pretrain import PretrainDataModule

def pss_anon_mb(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("Pss_Anon")) / 1024
    except (OSError, StopIteration):
        return 0.0

peak = {"total": 0.0, "own": 0.0, "workers": 0.0}
encoding = threading.Event()
def sample():  # this process's and its workers' anonymous memory together, every 50 ms while encoding
    while True:
        if encoding.is_set():
            children = [int(c) for path in glob.glob(f"/proc/{os.getpid()}/task/*/children")
                        for c in open(path).read().split()]
            own, workers = pss_anon_mb(os.getpid()), sum(pss_anon_mb(c) for c in children)
            peak.update(total=max(peak["total"], own + workers), own=max(peak["own"], own),
                        workers=max(peak["workers"], workers))
        time.sleep(0.05)
threading.Thread(target=sample, daemon=True).start()
corpus, cache, workers = sys.argv[1], sys.argv[2], int(sys.argv[3])
dm = PretrainDataModule(TextFiles([corpus], blank_line_documents=True, streaming=True),
                        {"vocab_size": 8192, "sample_chars": 20_000_000}, cache_dir=cache, block_size=128,
                        batch_size=32, encode_workers=workers)
encoding.set()
started = time.perf_counter()
dm.prepare_data()
seconds = time.perf_counter() - started
encoding.clear()
dm.setup("fit")
print(json.dumps({"seconds": seconds, "tokens": dm.train_tokens + len(dm.datasets["validation"].tokens), **peak}))
"""


def write_corpus(folder: Path, characters: int) -> int:
    """Numbered copies of the embedded Wikipedia's paragraphs, blank-line separated, in 64 MB files."""
    paragraphs = [p.strip() for _, text in EmbeddedWikipedia().read_documents() for p in text.split("\n\n")
                  if len(p.strip()) > 200]
    folder.mkdir(parents=True)
    written, copy, index = 0, 0, 0
    out = open(folder / f"part-{index:04d}.txt", "w", encoding="utf-8")
    while written < characters:
        for paragraph in paragraphs:
            text = f"copy {copy}. {paragraph}\n\n"
            out.write(text)
            written += len(text)
            if out.tell() >= FILE_BYTES:
                out.close()
                index += 1
                out = open(folder / f"part-{index:04d}.txt", "w", encoding="utf-8")
        copy += 1
    out.close()
    return written


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=200_000_000, help="the first size; the second is twice it")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--chars-per-token", type=float, default=4.3, help="to size the corpus (measured: 4.3)")
    args = parser.parse_args()
    rows = []
    (REPO / "outputs").mkdir(exist_ok=True)
    print("| corpus tokens | workers | encode tokens/s | peak memory, encoder + workers (Pss_Anon) | cache size | text size |")
    print("|---|---|---|---|---|---|")
    for tokens in (args.tokens, 2 * args.tokens):
        with tempfile.TemporaryDirectory(dir=REPO / "outputs") as tmp:
            corpus, cache = Path(tmp) / "corpus", Path(tmp) / "cache"
            characters = write_corpus(corpus, int(tokens * args.chars_per_token))
            done = subprocess.run([sys.executable, "-c", ENCODE, str(corpus), str(cache), str(args.workers)],
                                  cwd=REPO, capture_output=True, text=True,
                                  env={**os.environ, "PYTHONPATH": str(REPO)})
            if done.returncode:
                raise SystemExit(done.stderr[-3000:])
            figures = json.loads(done.stdout.strip().splitlines()[-1])
            cache_bytes = sum(folder_bytes(p) for p in cache.rglob("*-shards"))
            row = {"tokens": figures["tokens"], "workers": args.workers,
                   "tokens_per_s": figures["tokens"] / figures["seconds"], "seconds": figures["seconds"],
                   "peak_mb": figures["total"], "own_mb": figures["own"], "workers_mb": figures["workers"],
                   "cache_mb": cache_bytes / 2**20, "text_mb": characters / 2**20}
            rows.append(row)
            print(f"| {row['tokens']:,} | {args.workers} | {row['tokens_per_s']:,.0f} | {row['peak_mb']:,.0f} MB "
                  f"(encoder alone {row['own_mb']:,.0f}, workers together {row['workers_mb']:,.0f}) | "
                  f"{row['cache_mb']:,.0f} MB | {row['text_mb']:,.0f} MB |", flush=True)
    print(json.dumps({"bench": "corpus_scale", "rows": rows}))


if __name__ == "__main__":
    main()
