"""How many words a word-milestone checkpoint has really seen (issue 86).

`save_at_words` places a milestone at the input tokens that hold its words at the train split's mean words per
position (training/milestones.py). The blocks a run has seen by then are a shuffled sample of the split, so the words
in them differ from the milestone's name. This counts them exactly: every train document is encoded again with its
character offsets, a token starts a whitespace word when its first character follows whitespace (or starts the
document), and the flags are laid out as the token cache lays out its ids (checked equal). Then, for `--orders`
seeded shuffles of the packed blocks, it sums the words in the batches up to each milestone's step.

    python bench/milestone_words.py                          # gutenwiki-10m, the strict_small study's milestones
    python bench/milestone_words.py --orders 50 data.batch_size=32

Prints a Markdown table, per milestone: the words seen at the step that saves it, min / median / max over the
orders, relative to its name; and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np
from hydra.utils import instantiate
from tokenizers import Tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from armlm.common.config import compose_config  # noqa: E402
from armlm.datamodules.shards import read_shards, split_words  # noqa: E402
from armlm.training.milestones import word_points  # noqa: E402

ENCODE_BATCH = 256


def word_starts(tokenizer: Tokenizer, documents: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Token ids of the documents as the cache writes them ([EOD] after each non-empty one), and beside each a 1
    where the token opens a whitespace word (0 for [EOD])."""
    eod = tokenizer.token_to_id("[EOD]")
    ids: list[np.ndarray] = []
    flags: list[np.ndarray] = []
    for start in range(0, len(documents), ENCODE_BATCH):
        batch = documents[start : start + ENCODE_BATCH]
        for text, encoding in zip(batch, tokenizer.encode_batch(batch, add_special_tokens=False), strict=True):
            if not encoding.ids:
                continue
            opens = [int(begin == 0 or text[begin - 1].isspace()) for begin, _ in encoding.offsets]
            ids.append(np.asarray([*encoding.ids, eod], dtype=np.int64))
            flags.append(np.asarray([*opens, 0], dtype=np.int64))
    return np.concatenate(ids), np.concatenate(flags)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--orders", type=int, default=20, help="seeded shuffles of the blocks")
    parser.add_argument("--words", type=int, nargs="+", default=[n * 1_000_000 for n in range(1, 11)])
    parser.add_argument("overrides", nargs="*", help="train.py overrides (default data=gutenwiki)")
    args = parser.parse_args()
    cfg = compose_config("train", ["data=gutenwiki", "model=small", *args.overrides])
    datamodule = instantiate(cfg.data, input_format="blocks", seed=0)
    datamodule.setup("fit")
    paths = datamodule.cache_paths()
    cached, _ = read_shards(paths.splits["train"])
    tokenizer = Tokenizer.from_file(str(paths.tokenizer / "tokenizer.json"))
    ids, opens = word_starts(tokenizer, list(datamodule.corpus.documents("train")))
    if not np.array_equal(ids, np.asarray(cached[: len(cached)], dtype=np.int64)):
        raise SystemExit("the re-encoded ids differ from the token cache's: rebuild the cache, then run this again")
    counted = split_words(paths.splits["train"])
    span = datamodule.block_size - 1  # each packed block is [CLS] + span tokens of the stream
    blocks = len(ids) // span
    block_words = opens[: blocks * span].reshape(blocks, span).sum(axis=1)
    batch = datamodule.batch_size
    positions_per_step = batch * datamodule.block_size
    epoch_positions = datamodule.epoch_positions()
    per_position = counted / epoch_positions
    points = word_points(list(args.words), per_position, epoch_positions, 1.0)
    print(f"train split: {counted:,} words by str.split, {int(opens.sum()):,} word-opening tokens, {len(ids):,} "
          f"tokens, {blocks:,} blocks of {span}; {per_position:.4f} words a position")
    seen: dict[int, list[float]] = {w: [] for w in points}
    for order in range(args.orders):
        shuffled = np.random.default_rng(order).permutation(blocks)[: epoch_positions // datamodule.block_size]
        per_step = np.cumsum(block_words[shuffled].reshape(-1, batch).sum(axis=1))
        for words, tokens in points.items():
            step = -(-tokens // positions_per_step)  # the step whose end first holds `tokens` positions
            seen[words].append(float(per_step[step - 1]) / words - 1)
    rows = {w: (min(s), statistics.median(s), max(s)) for w, s in seen.items()}
    print(f"\n| milestone | input tokens | words seen / name - 1, over {args.orders} orders: min | median | max |")
    print("|---|---|---|---|---|")
    for words, (low, mid, high) in rows.items():
        print(f"| {words:,} | {points[words]:,} | {low:+.4%} | {mid:+.4%} | {high:+.4%} |")
    print(json.dumps({"split_words": counted, "word_opening_tokens": int(opens.sum()), "orders": args.orders,
                      "relative_error": {str(w): [round(v, 6) for v in r] for w, r in rows.items()}}))


if __name__ == "__main__":
    main()
