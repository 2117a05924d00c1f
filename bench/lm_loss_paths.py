"""The LM-head loss's two ways of handling an underflowing target probability (models.lm_loss): the branch over
the rare rows that eager CPU steps take, and the branch-free form a GPU or a compiled step takes. Each is timed on
the same block of logits, alternately with the block's softmax (the pass every block makes anyway), and what the
branch-free form adds is printed as a share of that softmax, with its spread.

    python bench/lm_loss_paths.py                  # 512 rows x V=8,192 (one CPU block), 30 rounds
    python bench/lm_loss_paths.py --rows 4096 --device cuda
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from armlm.models.lm_loss import nll_branch_free, nll_branching  # noqa: E402
from bench.flops import synchronize  # noqa: E402
from bench.machine import require_device  # noqa: E402


def timed(fn, *, device: torch.device) -> float:
    synchronize(device)
    start = time.perf_counter()
    fn()
    synchronize(device)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=512)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    device = require_device(args.device, "give --device cpu")
    generator = torch.Generator(device=device).manual_seed(0)
    logits = torch.randn(args.rows, args.vocab, generator=generator, device=device) * 3
    probs = torch.softmax(logits, dim=-1)
    targets = torch.randint(args.vocab, (args.rows,), generator=generator, device=device)
    torch.testing.assert_close(nll_branching(probs, logits, targets), nll_branch_free(probs, logits, targets))
    forms = {"softmax": (lambda: torch.softmax(logits, dim=-1)),
             "branching": (lambda: nll_branching(probs, logits, targets)),
             "branch_free": (lambda: nll_branch_free(probs, logits, targets))}
    seconds: dict[str, list[float]] = {name: [] for name in forms}
    for _ in range(3):  # warm-up
        for form in forms.values():
            form()
    for _ in range(args.rounds):
        for name, form in forms.items():
            seconds[name].append(timed(form, device=device))
    ratios = sorted((f - b) / s for f, b, s in zip(seconds["branch_free"], seconds["branching"], seconds["softmax"]))
    result = {"rows": args.rows, "vocab": args.vocab, "device": str(device), "rounds": args.rounds,
              **{f"{name}_ms": 1e3 * statistics.median(values) for name, values in seconds.items()},
              "ratio_median": statistics.median(ratios), "ratio_q1": ratios[len(ratios) // 4],
              "ratio_q3": ratios[(3 * len(ratios)) // 4]}
    print("| form | median ms per block |\n|---|---|")
    print(f"| the block's softmax | {result['softmax_ms']:.3f} |")
    print(f"| branching (eager CPU) | {result['branching_ms']:.3f} |")
    print(f"| branch-free (GPU, compiled) | {result['branch_free_ms']:.3f} |")
    print(f"\n(branch-free - branching) / softmax: median {result['ratio_median']:.2f} "
          f"[quartiles {result['ratio_q1']:.2f}, {result['ratio_q3']:.2f}] over {args.rounds} alternating rounds")
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
