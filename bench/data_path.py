"""Is the data path ever the bottleneck? Tokenization throughput, DataModule batches/s against model steps/s.

    python bench/data_path.py                       # the default corpus (embedded Wikipedia), 32 x 128 blocks
    python bench/data_path.py data=brown            # any train.py data/model override

One process: it prepares a fresh token cache in a temporary folder (tokenizer training, then the batch encoder
over every split, timed separately), then reads `--batches` batches from the DataModule's train loader for
both input formats (packed blocks; segment pairs for MLM+NSP), then times every armlm objective's training step at
the same batch shape. It also times MLM's corruption at V and 8 x V: per-step work that grew with the
vocabulary would show there. Prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from hydra.utils import instantiate
from tokenizers import Tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bench.throughput as throughput  # noqa: E402
from armlm.common.config import compose_config  # noqa: E402
from armlm.common.machine import keep_large_allocations_on_the_heap  # noqa: E402
from armlm.datamodules.tokenizer import encode_documents  # noqa: E402
from armlm.objectives.mlm import MaskedLM  # noqa: E402
from bench.flops import Shape  # noqa: E402


def batches_per_second(datamodule, n_batches: int) -> float:
    """Batches/s of the train loader, epoch boundaries (a new shuffled order) included."""
    loader = datamodule.train_dataloader()
    batches = iter(loader)
    next(batches)  # worker start-up and first-batch costs are not steady state
    started = time.perf_counter()
    for _ in range(n_batches):
        if next(batches, None) is None:
            loader.sampler.set_epoch(loader.sampler.epoch + 1)
            batches = iter(loader)
            next(batches)
    return n_batches / (time.perf_counter() - started)


def corruption_seconds(vocab_size: int, shape: tuple[int, int], repeats: int = 20) -> float:
    objective = MaskedLM()
    objective.set_vocabulary(throughput.vocabulary(vocab_size))
    ids = torch.randint(throughput.N_SPECIAL, vocab_size, shape)
    generator = torch.Generator().manual_seed(0)
    objective.corrupt(ids, generator)
    started = time.perf_counter()
    for _ in range(repeats):
        objective.corrupt(ids, generator)
    return (time.perf_counter() - started) / repeats


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("overrides", nargs="*", help="train.py overrides, e.g. data=brown model=tiny")
    p.add_argument("--batches", type=int, default=300)
    p.add_argument("--steps", type=int, default=4, help="training steps timed per objective")
    p.add_argument("--block-size", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=32)
    args = p.parse_args(argv)
    keep_large_allocations_on_the_heap()  # as train.py does
    result: dict = {}
    with tempfile.TemporaryDirectory() as cache:
        cfg = compose_config("train", [*args.overrides, f"data.cache_dir={cache}", f"data.block_size={args.block_size}",
                                       f"data.batch_size={args.batch_size}"])
        datamodule = instantiate(cfg.data, input_format="blocks", seed=0)
        started = time.perf_counter()
        datamodule.prepare_data()  # tokenizer training + encoding of every split, with progress bars
        result["prepare_seconds"] = time.perf_counter() - started
        documents = datamodule.corpus.load()
        tokenizer = Tokenizer.from_file(str(datamodule.cache_paths().tokenizer / "tokenizer.json"))
        started = time.perf_counter()
        tokens, _ = encode_documents(tokenizer, documents["train"], desc="train (timed)")
        result["encode_tokens_per_s"] = len(tokens) / (time.perf_counter() - started)
        result["train_tokens"] = int(len(tokens))
        result["characters_per_s"] = sum(map(len, documents["train"])) / (len(tokens) / result["encode_tokens_per_s"])
        datamodule.setup("fit")
        result["batches_per_s"] = {"blocks": batches_per_second(datamodule, args.batches)}
        pairs = instantiate(cfg.data, input_format="segment_pairs", seed=0)
        pairs.setup("fit")
        result["batches_per_s"]["segment_pairs"] = batches_per_second(pairs, args.batches)
        vocab_size = datamodule.vocabulary.size
    model = cfg.model
    shape = Shape(model.d_model, model.n_layers, model.n_heads, model.d_ff, vocab_size, args.batch_size,
                  args.block_size)
    bench_args = throughput.parse_args(["--rounds", "1", "--steps", str(args.steps)])
    batch = torch.randint(throughput.N_SPECIAL, vocab_size, (shape.batch_size, shape.seq_len))
    result["steps_per_s"] = {}
    for contestant in throughput.armlm_contestants(bench_args, shape, torch.device("cpu"), batch):
        throughput.timed(contestant.train, 1, torch.device("cpu"))  # warm-up
        seconds = [throughput.timed(contestant.train, 1, torch.device("cpu")) for _ in range(args.steps)]
        result["steps_per_s"][contestant.name] = 1 / statistics.median(seconds)
    fastest_step = max(result["steps_per_s"].values())
    result["data_over_model"] = {fmt: bps / fastest_step for fmt, bps in result["batches_per_s"].items()}
    result["corruption_ms"] = {str(v): 1000 * corruption_seconds(v, (args.batch_size, args.block_size))
                               for v in (vocab_size, 8 * vocab_size)}
    result["config"] = {"overrides": args.overrides, "block_size": args.block_size, "batch_size": args.batch_size,
                        "vocab_size": vocab_size, "batches": args.batches, "threads": torch.get_num_threads()}
    print_table(result)
    print(json.dumps(result))


def print_table(r: dict) -> None:
    c = r["config"]
    print(f"# data path: {' '.join(c['overrides']) or 'default corpus'}, batch {c['batch_size']} x {c['block_size']}, "
          f"V={c['vocab_size']}, {c['threads']} threads")
    print(f"tokenizer training + encoding of every split (fresh cache): {r['prepare_seconds']:.1f} s")
    print(f"batch encoder: {r['encode_tokens_per_s']:,.0f} tokens/s ({r['characters_per_s']:,.0f} characters/s) "
          f"over {r['train_tokens']:,} training tokens")
    print("| what | per second | data / fastest model step |")
    print("|---|---|---|")
    for fmt, bps in r["batches_per_s"].items():
        print(f"| DataModule batches ({fmt}) | {bps:,.0f} | {r['data_over_model'][fmt]:,.0f} x |")
    for name, sps in r["steps_per_s"].items():
        print(f"| {name} training steps | {sps:.2f} | |")
    sizes = list(r["corruption_ms"].items())
    print(f"MLM corruption of one batch: {sizes[0][1]:.2f} ms at V={sizes[0][0]}, {sizes[1][1]:.2f} ms at "
          f"V={sizes[1][0]}")


if __name__ == "__main__":
    main()
