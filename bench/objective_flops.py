"""Training FLOPs per step and per input token of each objective (models.flops, as train.py's max_flops budget
counts them, auxiliary networks such as ELECTRA's generator included), on random blocks of a given shape: what an
equal-compute study's budget is set from. Averaged over corruption draws; no training, seconds on a CPU.

    python bench/objective_flops.py --objectives mlm electra replace_mlm electra_15 all_tokens_mlm ar
    python bench/objective_flops.py --model small --vocab 1024 --block 64 --batch 32 --tokens 2200000
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from armlm.models.flops import TRAINING_PASSES  # noqa: E402
from bench.objective_cases import objective_case  # noqa: E402


def step_flops(objective_name: str, model: str, vocab: int, block: int, batch: int, draws: int) -> float:
    """Mean training FLOPs of one step of `objective_name` over `draws` random batches."""
    total = 0.0
    with torch.no_grad():
        for draw in range(draws):
            case = objective_case(objective_name, model=model, vocab=vocab, block=block, batch=batch, seed=draw)
            g = torch.Generator().manual_seed(draw)
            total += TRAINING_PASSES * case.objective.loss(case.batch, case.model, g).forward_flops
    return total / draws


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--objectives", nargs="+", default=["ar", "mlm", "electra", "electra_15", "replace_mlm",
                                                              "all_tokens_mlm"])
    parser.add_argument("--model", default="small")
    parser.add_argument("--vocab", type=int, default=1024)
    parser.add_argument("--block", type=int, default=64)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--draws", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=2_200_000, help="the token budget to convert, per objective")
    args = parser.parse_args(argv)
    per_step = args.block * args.batch
    steps = -(-args.tokens // per_step)
    print(f"model={args.model} V={args.vocab} {args.batch} x {args.block} tokens a step; {args.tokens:,} input tokens "
          "= "
          f"{steps} steps")
    print("| objective | training FLOPs / step | / input token | at the token budget | / mlm |")
    print("|---|---|---|---|---|")
    flops = {name: step_flops(name, args.model, args.vocab, args.block, args.batch, args.draws)
             for name in args.objectives}
    reference = flops.get("mlm")
    for name, value in flops.items():
        ratio = f"{value / reference:.3f}" if reference else "-"
        print(f"| {name} | {value:.4g} | {value / per_step:.4g} | {value * steps:.4g} | {ratio} |")


if __name__ == "__main__":
    main()
