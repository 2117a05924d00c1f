"""How many words a word-milestone checkpoint has really seen (issue 86).

`save_at_words` counts the words of every step's blocks before training (training.milestones: the tokens that open a
whitespace word, datamodules.words, and the loader's order replayed) and saves at the end of the first step that
holds a milestone's words. This prints, for `--orders` sampler seeds, how far past its name each milestone lands
that way, and how far the placement armlm used before (the split's mean words per input position, until 5 December
2026) would have landed, either side.

    python bench/milestone_words.py                          # gutenwiki-10m, the strict_small study's milestones
    python bench/milestone_words.py --orders 50 data.batch_size=32

Prints a Markdown table and one JSON line. The first run on a token cache builds its word-start flags (the train
split encoded again with character offsets), timed.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

from hydra.utils import instantiate

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from armlm.common.config import compose_config  # noqa: E402
from armlm.training.milestones import word_points, words_by_batch  # noqa: E402

KEPT_SEEDS = (6, 7, 8)  # kept for an independent replication: never run here


def spread(values: list[float]) -> tuple[float, float, float]:
    return min(values), statistics.median(values), max(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--orders", type=int, default=20, help="sampler seeds, 1-5 and 9 on (a run's seed orders its blocks)")
    parser.add_argument("--words", type=int, nargs="+", default=[n * 1_000_000 for n in range(1, 11)])
    parser.add_argument("overrides", nargs="*", help="train.py overrides (default data=gutenwiki)")
    args = parser.parse_args()
    cfg = compose_config("train", ["data=gutenwiki", "model=small", *args.overrides])
    datamodule = instantiate(cfg.data, input_format="blocks", seed=0)
    datamodule.setup("fit")
    started = time.perf_counter()
    block_words = datamodule.block_words()
    flag_seconds = time.perf_counter() - started
    per_position = datamodule.train_words / datamodule.epoch_positions()
    per_step = datamodule.batch_size * datamodule.block_size
    steps = datamodule.epoch_positions() // per_step
    print(f"train split: {datamodule.train_words:,} words by str.split, {int(block_words.sum()):,} opened in its "
          f"{len(block_words):,} blocks; word starts read or built in {flag_seconds:.1f} s")
    over: dict[int, list[float]] = {w: [] for w in args.words}
    mean_rate: dict[int, list[float]] = {w: [] for w in args.words}
    for seed in [s for s in range(1, args.orders + 4) if s not in KEPT_SEEDS][: args.orders]:
        seen = words_by_batch(block_words, datamodule.batch_size, 1, seed, steps)
        for words, tokens in word_points(list(args.words), seen, per_step, 1.0).items():
            over[words].append(float(seen[tokens // per_step - 1] - words))
            before = math.ceil(math.ceil(words / per_position) / per_step)  # the step the mean rate chose
            mean_rate[words].append(float(seen[before - 1]) / words - 1)
    print(f"\n| milestone | counted: words past it, over {args.orders} orders: min | median | max "
          "| mean rate: words seen / name - 1: min | median | max |")
    print("|---|---|---|---|---|---|---|")
    for words in args.words:
        (a, b, c), (d, e, f) = spread(over[words]), spread(mean_rate[words])
        print(f"| {words:,} | {a:,.0f} | {b:,.0f} | {c:,.0f} | {d:+.4%} | {e:+.4%} | {f:+.4%} |")
    print(json.dumps({"orders": args.orders, "words_per_step": round(per_position * per_step, 1),
                      "flag_seconds": round(flag_seconds, 1),
                      "counted_words_past": {str(w): spread(v) for w, v in over.items()},
                      "mean_rate_relative": {str(w): [round(x, 6) for x in spread(v)] for w, v in mean_rate.items()}}))


if __name__ == "__main__":
    main()
