"""Sentences per second of each zero-shot scoring method (zeroshot.scoring) on BLiMP sentences, and what the whole
folder would take.

    python bench/zeroshot_speed.py --checkpoint outputs/mlm/<run>          # its tokenizer and model size
    python bench/zeroshot_speed.py --checkpoint <run> --sentences 300 --rounds 5

One backbone (the checkpoint's weights) is timed under every method: `exact` reads it as an AR model would, the
masked methods as an MLM, so the ratios are pure cost, whatever the checkpoint was trained for. The methods
alternate inside each round on the same sentences, so a noisy neighbour slows them alike. Printed: per method the
median sentences/s over rounds (min-max), its cost over `exact` (per round, then the median), and the minutes the
folder's unique sentences would take at that rate; then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from tokenizers import Tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from armlm.common.config import data_dir  # noqa: E402
from armlm.common.vocabulary import MASK  # noqa: E402
from armlm.datamodules.encoding import token_id  # noqa: E402
from armlm.objectives.ar import AutoregressiveLM  # noqa: E402
from armlm.objectives.mlm import MaskedLM  # noqa: E402
from armlm.sources.armlm import armlm_special_tokens  # noqa: E402
from armlm.sources.base import Reading  # noqa: E402
from armlm.training.pretrained import load_pretrained  # noqa: E402
from armlm.zeroshot.blimp import read_blimp  # noqa: E402
from armlm.zeroshot.scoring import METHODS, SentenceScorer, encode_sentences  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True, help="a pretraining run folder or checkpoint file")
    parser.add_argument("--blimp-dir", default=None, help="default: $ARMLM_DATA_DIR/blimp or ../shared/data/blimp")
    parser.add_argument("--sentences", type=int, default=200, help="sentences timed per method and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--tokens-per-pass", type=int, default=16384)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    blimp_dir = args.blimp_dir or str(data_dir() / "blimp")
    pretrained = load_pretrained(args.checkpoint)
    model = pretrained.backbone()
    tokenizer = Tokenizer.from_str(pretrained.tokenizer_json)
    texts = sorted({s for p in read_blimp(blimp_dir) for s in (*p.good, *p.bad)})
    step = max(1, len(texts) // args.sentences)
    sample = encode_sentences(tokenizer, texts[::step][:args.sentences], armlm_special_tokens(tokenizer))
    mask_id = token_id(tokenizer, MASK)
    readings = {m: Reading.of_objective(AutoregressiveLM if m == "exact" else MaskedLM) for m in args.methods}
    scorers = {m: SentenceScorer(model, readings[m], mask_id,
                                 tokens_per_pass=args.tokens_per_pass) for m in args.methods}
    rates: dict[str, list[float]] = {m: [] for m in args.methods}
    with torch.inference_mode():
        scorers[args.methods[0]].score(sample[:20], args.methods[0], progress=False)  # warm-up
        for _ in range(args.rounds):
            for method in args.methods:
                started = time.perf_counter()
                scorers[method].score(sample, method, progress=False)
                rates[method].append(len(sample) / (time.perf_counter() - started))
    mean_tokens = sum(len(s.ids) - 1 for s in sample) / len(sample)
    print(f"{pretrained.path} ({pretrained.objective_name}, d_model {model.config.d_model}, {model.config.n_layers} "
          f"layers, V {model.config.vocab_size}); {len(sample)} BLiMP sentences of {mean_tokens:.1f} target tokens on "
          f"average, {args.rounds} rounds, {torch.get_num_threads()} threads; the folder holds {len(texts):,}")
    print("| method | sentences/s (min-max) | cost / exact (min-max) | whole folder, min |\n|---|---|---|---|")
    rows = {}
    for method in args.methods:
        ratio = ([a / b for a, b in zip(rates["exact"], rates[method], strict=True)] if "exact" in rates else [])
        rows[method] = {"sentences_per_s": {"median": statistics.median(rates[method]), "min": min(rates[method]),
                                            "max": max(rates[method])},
                        "cost_over_exact": {"median": statistics.median(ratio), "min": min(ratio), "max": max(ratio)}
                        if ratio else None,
                        "folder_minutes": len(texts) / statistics.median(rates[method]) / 60}
        r = rows[method]
        cost = (f"{r['cost_over_exact']['median']:.1f} ({r['cost_over_exact']['min']:.1f}-"
                f"{r['cost_over_exact']['max']:.1f})" if ratio else "-")
        print(f"| {method} | {r['sentences_per_s']['median']:.1f} ({r['sentences_per_s']['min']:.1f}-"
              f"{r['sentences_per_s']['max']:.1f}) | {cost} | {r['folder_minutes']:.1f} |")
    result = {"checkpoint": str(pretrained.path), "sentences": len(sample), "mean_target_tokens": mean_tokens,
              "folder_sentences": len(texts), "threads": torch.get_num_threads(), "rows": rows}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
