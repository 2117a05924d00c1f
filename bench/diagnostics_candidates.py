"""How many candidates K the pairwise diagnostics need: every figure at several K against a reference.

    python bench/diagnostics_candidates.py outputs/study/mlm_v1024 --ks 10 25 50 100 200 -- data=brown_enwiki
    python bench/diagnostics_candidates.py outputs/study/ar --ks 10 25 50 --pairs 20 -- data=brown_enwiki

The reference is the exact mode (every ordinary token) where it is affordable: an MLM's costs 2V passes per
pair, an AR's V in the prefix context (pair_context=prefix) and V^2 inside whole sentences, where the largest
K is the reference instead. Prints a Markdown table per pair kind (value at each K, and its error against the reference)
and the JSON of all figures.
"""

from __future__ import annotations

import argparse
import json
import sys

from armlm.diagnostics.run import MAX_EXACT_PASSES, evaluate_config, exact_passes, pairwise, setup
from armlm.diagnostics.sentences import sample_pairs

METRICS = ("p_ppl", "u_ppl", "kl_all", "kl_gold")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint")
    parser.add_argument("--ks", type=int, nargs="+", default=[10, 25, 50, 100])
    parser.add_argument("--pairs", type=int, default=50)
    parser.add_argument("--no-exact", action="store_true",
                        help="use the largest K as the reference, not the exact mode")
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)  # evaluate.yaml overrides follow --
    args = parser.parse_args(argv[:split])
    cfg = evaluate_config([f"checkpoint={args.checkpoint}", f"pairs={args.pairs}", "output_dir=.",
                           "likelihood.enabled=false", *argv[split + 1:]])  # pairs only: no held-out blocks
    s = setup(cfg)
    ks: list[int | None] = sorted(args.ks)
    vocab = s.model.config.vocab_size
    exact_affordable = exact_passes(s.method, cfg.pair_context, vocab) <= MAX_EXACT_PASSES
    if exact_affordable and not args.no_exact:
        ks.append(None)  # the exact mode, last
    reference = ks[-1]
    print(f"{s.source.name}, V = {s.model.config.vocab_size}, {args.pairs} pairs per kind, "
          f"reference: {'exact' if reference is None else f'K = {reference}'}")

    figures: dict = {}
    for kind in cfg.kinds:
        pairs = sample_pairs(s.sentences, args.pairs, kind, seed=int(cfg.seed))
        by_k = {}
        for k in ks:
            result = pairwise(s, pairs, k, cfg)
            by_k["exact" if k is None else k] = {"rows": result.table(), "seconds": round(result.seconds, 1),
                                                 "gap": result.gaps[s.method.headline_joint].mean().item()}
            print(f"  {kind}: K = {k or 'exact'} done in {result.seconds:.1f} s", flush=True)
        figures[kind] = by_k
        ref = by_k["exact" if reference is None else reference]
        print(f"\n### {kind} pairs\n")
        print("| construction | metric | " + " | ".join(f"K={k or 'exact'}" for k in ks) + " | max rel. error at K |")
        print("|---" * (len(ks) + 3) + "|")
        for row in ref["rows"]:
            for metric in METRICS:
                if metric not in ref["rows"][row]:
                    continue
                values = [by_k["exact" if k is None else k]["rows"][row][metric] for k in ks]
                errors = ", ".join(f"{k}: {abs(v / ref['rows'][row][metric] - 1):.1%}"
                                   for k, v in zip(ks[:-1], values[:-1]))
                print(f"| {row} | {metric} | " + " | ".join(f"{v:.3f}" for v in values) + f" | {errors} |")
        print("| gap (headline joint) | mean | " + " | ".join(f"{by_k['exact' if k is None else k]['gap']:.3f}"
                                                             for k in ks) + " | |")
        print("| time | s | " + " | ".join(str(by_k["exact" if k is None else k]["seconds"]) for k in ks) + " | |")
    print("\n" + json.dumps(figures))


if __name__ == "__main__":
    main()
