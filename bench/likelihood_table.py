"""Likelihood of several pretraining arms on the same held-out blocks, over seeds: AR's exact NLL per token beside
the any-order bound of each bidirectional arm (README, "Likelihood"), with paired differences against a
reference arm.

    python bench/likelihood_table.py --seeds 1 2 3 --reference ar \\
        --arm ar=outputs/studies/findings-cpu/ar/seed{seed}/pretrain \\
        --arm mlm=outputs/studies/findings-cpu/mlm/seed{seed}/pretrain \\
        --arm masked_diffusion=outputs/mdlm/seed{seed} -- likelihood.blocks=64

(`--` ends the options: `armlm evaluate` overrides follow it.) Each (arm, seed) is one `armlm evaluate` process
with only the likelihood enabled, into outputs/likelihood/<arm>/seed<k>; a finished one (its diagnostics.json
exists) is read, not rerun. Prints a Markdown table: per arm the kind (exact or upper bound), NLL per target
token and perplexity (mean and 95 % t-interval over seeds), the largest relative Monte-Carlo standard error,
and the paired difference with the reference arm per seed.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run as a script from anywhere

from armlm.analysis.findings.verdicts import paired_interval  # noqa: E402

ROOT = REPO / "outputs" / "likelihood"


def evaluate(checkpoint: str, folder: Path, seed: int, overrides: list[str]) -> dict:
    report = folder / "diagnostics.json"
    if not report.is_file():
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "armlm", "evaluate", f"checkpoint={checkpoint}", f"hydra.run.dir={folder}",
                        f"seed={seed}", "independence=false", "representations.enabled=false", *overrides],
                       cwd=REPO, check=True, stdout=subprocess.DEVNULL)
        print(f"# {folder}: {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return json.loads(report.read_text())


def interval_text(values: list[float]) -> str:
    interval = paired_interval(values)
    if interval.n < 2:
        return f"{interval.mean:.4f}"
    return f"{interval.mean:.4f} [{interval.low:.4f}, {interval.high:.4f}]"


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--arm", action="append", required=True, help="name=checkpoint or run folder, with {seed}")
    p.add_argument("--seeds", type=int, nargs="+", required=True)
    p.add_argument("--reference", help="the arm every other is differenced against, per seed")
    p.add_argument("--out", type=Path, default=ROOT, help="where each (arm, seed) evaluation is written")
    args = p.parse_args(argv[:split])
    overrides = argv[split + 1:]
    arms = dict(a.split("=", 1) for a in args.arm)
    if args.reference and args.reference not in arms:
        p.error(f"--reference {args.reference} is not one of the arms {sorted(arms)}")
    # Every (arm, seed) is evaluated with the same evaluate seed, so every checkpoint sees the same blocks.
    reports = {(arm, seed): evaluate(pattern.format(seed=seed), args.out / arm / f"seed{seed}", 1,
                                     overrides)["likelihood"]
               for arm, pattern in arms.items() for seed in args.seeds}
    fingerprints = {key: part.get("blocks_fingerprint") for key, part in reports.items()}
    if len(set(fingerprints.values())) != 1:
        sys.exit(f"the checkpoints were scored on different blocks (another tokenizer, corpus or block size): "
                 f"{fingerprints}; compare only checkpoints of one data set, or give likelihood.block_size")
    print(f"| arm | kind | NLL per target token, seeds {args.seeds} | mean [95 % CI] | perplexity | "
          f"without [EOD] targets, mean | largest rel. MC s.e. | minus {args.reference or '-'} per seed | "
          "mean [95 % CI] |")
    print("|---|---|---|---|---|---|---|---|---|")
    for arm in arms:
        parts = [reports[(arm, seed)] for seed in args.seeds]
        nll = [part["nll_per_token"] for part in parts]
        kinds = {part["kind"] for part in parts}
        diff = ([n - reports[(args.reference, seed)]["nll_per_token"] for n, seed in zip(nll, args.seeds)]
                if args.reference and arm != args.reference else [])
        without = sum(part["nll_per_token_without_eod"] for part in parts) / len(parts)
        missed = "" if all(part["target_met"] for part in parts) else " (above target)"
        print(f"| {arm} | {', '.join(sorted(kinds))} | {', '.join(f'{n:.4f}' for n in nll)} | {interval_text(nll)} "
              f"| {math.exp(sum(nll) / len(nll)):.2f} | {without:.4f} "
              f"| {max(part['rel_mc_stderr'] for part in parts):.2%}{missed} "
              f"| {', '.join(f'{d:+.4f}' for d in diff) or '-'} | {interval_text(diff) if diff else '-'} |")
    first = reports[(next(iter(arms)), args.seeds[0])]
    print(f"\n{first['blocks']} held-out blocks of {first['block_size']} tokens, {first['target_tokens']} target "
          f"tokens (every position after [CLS], {first['eod_targets']} of them [EOD]), the same for every arm and "
          f"seed (fingerprint {first['blocks_fingerprint']}).")


if __name__ == "__main__":
    main()
