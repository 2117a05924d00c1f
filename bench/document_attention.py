"""What document-masked packing (data.cross_document_attention=false) costs per training step: each objective's
forward + backward on the same blocks with and without document ids, timed alternately in one process, round by
round, so a busy machine slows both alike. Prints each objective's ratio (with documents / without) as the median
and range over rounds. The blocks hold a document boundary every `--document-tokens` tokens on average (the
enwiki_short data: about 37 tokens a document at the cpu recipe).

    python bench/document_attention.py                       # model=small, 32 x 64 blocks, V = 1,024
    python bench/document_attention.py --objectives ar mlm electra --rounds 9
    python bench/document_attention.py --device cuda --bf16 --model base --block 128 --batch 128   # a GPU's shape
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from armlm.common.config import compose_config  # noqa: E402
from armlm.common.vocabulary import Vocabulary  # noqa: E402
from armlm.datamodules.blocks import document_ids  # noqa: E402
from armlm.models.backbone import Transformer  # noqa: E402
from armlm.training.setup import build, build_model_config  # noqa: E402
from bench.machine import require_device  # noqa: E402

EOD = 5  # the synthetic vocabulary's [EOD] (ids 0-5 are the special tokens)


def blocks(batch: int, block: int, vocab: int, document_tokens: float, seed: int) -> dict[str, torch.Tensor]:
    """Random ordinary tokens with an [EOD] at each position with probability 1 / document_tokens."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(6, vocab, size=(batch, block))
    ids[rng.random((batch, block)) < 1 / document_tokens] = EOD
    ids[:, 0] = 2
    return {"input_ids": torch.from_numpy(ids),
            "document_ids": torch.from_numpy(np.stack([document_ids(row, EOD) for row in ids]))}


def step_seconds(objective, model, batch, generator, steps: int, precision: torch.dtype | None) -> float:
    device = next(model.parameters()).device
    synchronize = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)  # the GPU runs ahead
    synchronize()
    started = time.perf_counter()
    for _ in range(steps):
        with torch.autocast(device.type, dtype=precision, enabled=precision is not None):
            loss = objective.loss(batch, model, generator).loss
        loss.backward()
        model.zero_grad(set_to_none=True)
        objective.zero_grad(set_to_none=True)
    synchronize()
    return (time.perf_counter() - started) / steps


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--objectives", nargs="+", default=["ar", "mlm"])
    parser.add_argument("--model", default="small")
    parser.add_argument("--vocab", type=int, default=1024)
    parser.add_argument("--block", type=int, default=64)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--document-tokens", type=float, default=37.0)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--bf16", action="store_true", help="autocast to bf16 (the cpu recipe's precision)")
    parser.add_argument("--device", default="cpu", help="cpu, or cuda: each path with the kernels that device picks")
    args = parser.parse_args(argv)
    precision = torch.bfloat16 if args.bf16 else None
    device = require_device(args.device, "give --device cpu")
    batch = {name: t.to(device) for name, t in blocks(args.batch, args.block, args.vocab, args.document_tokens,
                                                        seed=0).items()}
    across = {"input_ids": batch["input_ids"]}
    share = float((batch["document_ids"].max(1).values > 0).float().mean())
    print(f"model={args.model} V={args.vocab} {args.batch} x {args.block}, {share:.0%} of blocks hold a boundary; "
          f"{args.rounds} rounds of {args.steps} steps, {'bf16' if args.bf16 else 'fp32'}, "
          f"{torch.cuda.get_device_name(device) if device.type == 'cuda' else f'{torch.get_num_threads()} threads'}")
    print("| objective | s/step across | s/step within | within / across, median (min-max) |")
    print("|---|---|---|---|")
    for name in args.objectives:
        cfg = compose_config("train", [f"objective={name}", f"model={args.model}"])
        objective = build(cfg.objective)
        objective.set_vocabulary(Vocabulary(args.vocab, 0, 1, 2, 3, 4, 5, unigram_counts=np.ones(args.vocab, np.int64)))
        config = build_model_config(cfg.model)
        config.vocab_size = args.vocab
        model = Transformer(config).to(device)
        objective.to(device)
        generator = torch.Generator(device).manual_seed(0)
        step_seconds(objective, model, batch, generator, 1, precision)  # warm-up, both paths
        step_seconds(objective, model, across, generator, 1, precision)
        times: dict[str, list[float]] = {"across": [], "within": []}
        for _ in range(args.rounds):
            times["across"].append(step_seconds(objective, model, across, generator, args.steps, precision))
            times["within"].append(step_seconds(objective, model, batch, generator, args.steps, precision))
        ratios = [w / a for w, a in zip(times["within"], times["across"], strict=True)]
        print(f"| {name} | {statistics.median(times['across']):.3f} | {statistics.median(times['within']):.3f} | "
              f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f}) |")


if __name__ == "__main__":
    main()
