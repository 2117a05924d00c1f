"""How many optimiser steps replaced-token detection spends at its constant-guess plateau, against a masked LM on the
same data and backbone. The corpus is synthetic and fully predictable from either neighbour (each sequence counts
upwards through `--alphabet` ordinary ids), so both objectives can drive their loss to near zero; what differs is
how soon. A masked LM's gradient asks attention directly for the neighbour that predicts the target; a detector's
only asks whether its own token agrees with that neighbour, a comparison with no signal until attention already
fetches it, so its loss sits at the binary entropy of the replaced share for a while first.

Prints, per seed, the first step at which each objective's loss (a moving mean over `--window` steps) falls below
`--fraction` of its constant-guess baseline: ln(alphabet) nats for the masked LM, the binary entropy of the
replaced share for ELECTRA's discriminator. 'never' means not within `--steps`.

    python bench/rtd_plateau.py                     # 3 seeds, 4,000 steps, d_model 64, 2 layers
    python bench/rtd_plateau.py --seeds 1 2 3 4 5 --lr 5e-4
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import deque
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from armlm.common.vocabulary import Vocabulary  # noqa: E402
from armlm.models.backbone import ModelConfig, Transformer  # noqa: E402
from armlm.objectives.base import Objective  # noqa: E402
from armlm.objectives.electra import Electra, binary_entropy  # noqa: E402
from armlm.objectives.mlm import MaskedLM  # noqa: E402

SPECIALS = 6  # ids 0-5: pad, unk, cls, sep, mask, eod


def counting_batch(rows: int, length: int, alphabet: int, cls_id: int, generator: torch.Generator) -> dict:
    start = torch.randint(0, alphabet, (rows, 1), generator=generator)
    ids = SPECIALS + (start + torch.arange(length)) % alphabet
    ids[:, 0] = cls_id
    return {"input_ids": ids}


def steps_to_leave(objective: Objective, vocab: Vocabulary, args: argparse.Namespace, seed: int) -> tuple[str, float]:
    """(the first step whose moving-mean loss is below `fraction` of the baseline, the last moving mean / baseline)."""
    torch.manual_seed(seed)
    model = Transformer(ModelConfig(vocab_size=vocab.size, d_model=args.d_model, n_layers=args.layers,
                                    n_heads=max(1, args.d_model // 32), d_ff=4 * args.d_model, max_len=args.length,
                                    dropout=0.0))
    objective.set_vocabulary(vocab)
    optimiser = torch.optim.AdamW([*model.parameters(), *objective.parameters()], lr=args.lr)
    data = torch.Generator().manual_seed(seed)
    losses: deque[float] = deque(maxlen=args.window)
    baselines: deque[float] = deque(maxlen=args.window)
    ratio = math.nan
    for step in range(1, args.steps + 1):
        out = objective.loss(counting_batch(args.rows, args.length, args.alphabet, vocab.cls_id, data), model, data)
        optimiser.zero_grad()
        out.loss.backward()
        optimiser.step()
        if "rtd_loss" in out.extras:  # the discriminator's own loss against its constant guess
            losses.append(out.extras["rtd_loss"][0].item())
            baselines.append(binary_entropy(out.extras["replaced_share"][0]).item())
        else:
            losses.append(out.loss.item())
            baselines.append(math.log(args.alphabet))
        ratio = (sum(losses) / len(losses)) / (sum(baselines) / len(baselines))
        if len(losses) == args.window and ratio < args.fraction:
            return str(step), ratio
    return "never", ratio


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--steps", type=int, default=4000)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument("--alphabet", type=int, default=44)
    parser.add_argument("--window", type=int, default=50)
    parser.add_argument("--fraction", type=float, default=0.5)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    vocab = Vocabulary(SPECIALS + args.alphabet, 0, 1, 2, 3, 4, 5,
                       unigram_counts=torch.tensor([0] * SPECIALS + [1] * args.alphabet).numpy())
    shape = dict(d_model=args.d_model, n_layers=args.layers, max_len=args.length, positions="learned",
                 norm_position="pre", dropout=0.0, layer_norm_eps=1e-5, init_std=0.02)
    print(f"steps until the loss falls below {args.fraction} x its constant-guess baseline "
          f"(moving mean of {args.window}; lr {args.lr}, d_model {args.d_model}, {args.layers} layers)")
    print("| seed | masked LM: step (loss / baseline) | ELECTRA's discriminator: step (loss / baseline) |")
    print("|---|---|---|")
    for seed in args.seeds:
        mlm_step, mlm_ratio = steps_to_leave(MaskedLM(), vocab, args, seed)
        rtd_step, rtd_ratio = steps_to_leave(Electra(**shape), vocab, args, seed)
        print(f"| {seed} | {mlm_step} ({mlm_ratio:.2f}) | {rtd_step} ({rtd_ratio:.2f}) |", flush=True)


if __name__ == "__main__":
    main()
