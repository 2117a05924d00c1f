"""What a vocabulary size does to a corpus: tokenizer training and encoding time, tokens per word, the unigram NLL per
token and per word, and the peak memory of building the cache, one fresh process per size.

    python bench/vocab_size.py data=gutenwiki --sizes 1024 8192 16384
    python bench/vocab_size.py data=gutenwiki data.corpus.streaming=true --sizes 8192   # the bounded-memory read
    python bench/vocab_size.py data=gutenwiki --train-tokens 10_000_000 --out runs/vocab  # and an AR run per size

With --train-tokens, each size then trains `train.py objective=ar model=small seed=1 max_tokens=N` (plus
--train-overrides) in <out>/vocab<size>, and reports its wall time, its held-out next-token loss per token and per
word (times the validation split's tokens per word: comparable across vocabularies) and its margin below the
unigram NLL of the same targets (val/own_below_unigram). A size whose folder already holds a finished run with the
same overrides is reported from it, not trained again, so an interrupted bench resumes where it stopped.

The cache is train.py's own (data.cache_dir, default .cache/armlm), keyed as train.py keys it, so a later
`train.py data=... data.tokenizer.vocab_size=N` finds it built; a size already built reports its tokens with no
build time. Words are whitespace-separated, as BabyLM counts them. Peak memory is the largest resident set of the
building process (ru_maxrss).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
RUN_DEFAULTS = ["objective=ar", "model=small", "seed=1", "trainer.enable_progress_bar=false"]  # --train-overrides win

BUILD = """
import json, resource, sys, time
from hydra.utils import instantiate
from armlm.common.config import compose_config
from armlm.datamodules.shards import split_words

cfg = compose_config("train", json.loads(sys.argv[1]))
datamodule = instantiate(cfg.data, input_format="blocks", seed=0)
built = not datamodule.cache_paths().complete()
started = time.perf_counter()
datamodule.prepare_data()
seconds = time.perf_counter() - started
datamodule.setup("fit")
words = {split: split_words(folder) for split, folder in datamodule.cache_paths().splits.items()}
tokens = {split: len(dataset.tokens) for split, dataset in datamodule.datasets.items()}
print(json.dumps({"vocab_size": datamodule.vocabulary.size, "build_seconds": seconds if built else None,
                  "tokens": tokens, "words": words, "unigram_nll_per_token": datamodule.unigram_baseline,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "cache": str(datamodule.cache_paths().tokenizer.parent)}))
"""


def measure(overrides: list[str], size: int) -> dict:
    command = [sys.executable, "-c", BUILD, json.dumps([*overrides, f"data.tokenizer.vocab_size={size}"])]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    if done.returncode != 0:
        raise SystemExit(f"vocab_size={size} failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    words, tokens = result["words"], result["tokens"]
    if None in words.values():
        raise SystemExit(f"{result['cache']} was built before its manifest counted words; delete it and rerun")
    result["tokens_per_word"] = {split: tokens[split] / words[split] for split in tokens}
    result["unigram_nll_per_word"] = result["unigram_nll_per_token"] * result["tokens_per_word"]["validation"]
    return result


def started_with(folder: Path) -> list[str] | None:
    """The overrides of the run in this folder (a resume's ckpt_path= left out), so a rerun of the bench after an
    interruption keeps the sizes it already trained and resumes the one it was training; None where none started."""
    overrides = folder / ".hydra" / "overrides.yaml"
    if not overrides.exists():
        return None
    return [o for o in yaml.safe_load(overrides.read_text()) or [] if not o.startswith("ckpt_path=")]


def train(overrides: list[str], size: int, tokens: int, extra: list[str], out: Path) -> dict:
    """One AR run at this vocabulary size; what its summary.json says about cost and learning."""
    folder = out / f"vocab{size}"
    defaults = [d for d in RUN_DEFAULTS if d.split("=")[0] not in {e.split("=")[0] for e in extra}]
    run_overrides = [*overrides, f"data.tokenizer.vocab_size={size}", *defaults, f"max_tokens={tokens}", *extra]
    recorded = started_with(folder)
    ours = recorded == run_overrides
    if not (ours and (folder / "summary.json").exists()):
        if not ours and folder.exists():  # a run of other settings: this size's run replaces it
            print(f"{folder} holds a run of other settings ({recorded}); replacing it", flush=True)
            shutil.rmtree(folder)
        resume = ["ckpt_path=last"] if (folder / "checkpoints" / "last.ckpt").is_file() else []
        command = [sys.executable, str(REPO / "train.py"), *run_overrides, f"hydra.run.dir={folder}", *resume]
        if subprocess.run(command, cwd=REPO).returncode != 0:
            raise SystemExit(f"the run at vocab_size={size} failed; its log is in {folder}")
    summary = json.loads((folder / "summary.json").read_text())
    return {"wall_seconds": summary["wall_seconds"], "tokens_seen": summary["tokens_seen"],
            "words_seen": summary["words_seen"], "val_loss": summary["val_loss"],
            "own_below_unigram": summary["own_below_unigram"]["all"], "run": str(folder)}


def table(results: list[dict]) -> str:
    lines = ["| vocabulary | train tokens | tokens/word (train, validation) | unigram NLL/token | unigram NLL/word | "
             "build s | peak MB |", "|---|---|---|---|---|---|---|"]
    for r in results:
        build = "cached" if r["build_seconds"] is None else f"{r['build_seconds']:.0f}"
        lines.append(f"| {r['vocab_size']:,} | {r['tokens']['train']:,} | {r['tokens_per_word']['train']:.3f}, "
                     f"{r['tokens_per_word']['validation']:.3f} | {r['unigram_nll_per_token']:.3f} | "
                     f"{r['unigram_nll_per_word']:.2f} | {build} | {r['peak_rss_mb']:.0f} |")
    trained = [r for r in results if "run" in r]
    if trained:
        lines += ["", "| vocabulary | tokens seen | words seen | wall s | val NLL/token | val NLL/word | "
                  "below unigram (own targets) |", "|---|---|---|---|---|---|---|"]
        lines += [f"| {r['vocab_size']:,} | {r['run']['tokens_seen']:,} | {r['run']['words_seen']:,.0f} | "
                  f"{r['run']['wall_seconds']:.0f} | {r['run']['val_loss']:.3f} | "
                  f"{r['run']['val_loss'] * r['tokens_per_word']['validation']:.2f} | "
                  f"{r['run']['own_below_unigram']:.3f} |" for r in trained]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("overrides", nargs="*", help="train.py overrides naming the data, e.g. data=gutenwiki")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 8192, 16384])
    parser.add_argument("--train-tokens", type=int, help="then train an AR run of this many input tokens per size")
    parser.add_argument("--train-overrides", nargs="*", default=[], help="more train.py overrides for those runs")
    parser.add_argument("--out", type=Path, default=REPO / "outputs" / "vocab_size", help="where the runs go")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    args.out = args.out.resolve()  # train.py runs from the checkout; the folder is read and kept from here
    results = []
    for size in args.sizes:
        results.append(measure(args.overrides, size))
        if args.train_tokens:
            results[-1]["run"] = train(args.overrides, size, args.train_tokens, args.train_overrides, args.out)
        print(json.dumps(results[-1]), flush=True)
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
