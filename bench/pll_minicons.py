"""armlm's pseudo-log-likelihood scorer (zeroshot.scoring) on a Hugging Face masked LM beside minicons'
`MaskedLMScorer`: per-sentence PLL and PLL-word-l2r sums on the same model and BLiMP sentences, and sentences per
second of each on the CPU.

    HF_HUB_OFFLINE=1 python bench/pll_minicons.py                              # random BERT, 2 layers, d 64
    HF_HUB_OFFLINE=1 python bench/pll_minicons.py --size base --sentences 100  # BERT-base's shape
    HF_HUB_OFFLINE=1 python bench/pll_minicons.py --model <folder>             # a downloaded bert-base-cased, say

Without `--model`, the bench builds its own model, as the hub is out of reach here: a random-weight
`BertForMaskedLM` (`--size`: tiny is 2 layers of d 64, base is BERT-base's 12 x 768) with a cased WordPiece
tokenizer trained on every BLiMP sentence and BERT's [CLS] $A [SEP] template, saved to `--out` (default a temporary
folder). Both sides then read that folder by path, in fp32, under `torch.inference_mode`, in one process at one
thread count.

Equality: armlm's `SentenceScorer.score(..., "pll" | "pll_word_l2r").log_prob` against minicons'
`sequence_score(..., PLL_metric="original" | "within_word_l2r")` summed per sentence; the largest |difference| per
method is printed, and every sentence over 1e-5. minicons is also run one sentence a call, where it pads nothing:
how far that moves it from its own batches is the fp32 rounding of its padded (attention-masked) path, the floor
against which a difference from armlm is read (it passes 1e-5 on sharp models: `--init-std 0.3`).

Speed: each side scores the same sentences from their text (its own tokenization included), the two alternating
within every round (armlm, minicons, armlm, minicons, ...), so a busy neighbour slows both alike; printed as the
median sentences/s over rounds (min-max) and armlm / minicons taken per round. Then one JSON line. On two cores
shared with another process, torch's two threads wait on each other at every operator: run on a quiet machine, or
give `--threads 1`.

How the two differ in method (the numbers do not depend on it, the speed does): minicons puts every masked copy of
a batch of `--minicons-batch` sentences, padded to the batch's longest, through the whole model, the vocabulary
projection at every position included, and reads one position per row; armlm groups sentences by length (no
padding), runs about `--tokens-per-pass` tokens a pass and projects only the position it reads.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from armlm.common.config import data_dir  # noqa: E402
from armlm.sources import ModelSource, open_source  # noqa: E402
from armlm.zeroshot.blimp import read_blimp  # noqa: E402
from armlm.zeroshot.scoring import SentenceScorer, encode_sentences, word_boundaries_known  # noqa: E402

TOLERANCE = 1e-5  # per-sentence |armlm - minicons|, fp32
METHODS = {"pll": "original", "pll_word_l2r": "within_word_l2r"}  # armlm's method: minicons' PLL_metric
SIZES = {"tiny": dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=2, intermediate_size=256),
         "base": dict(num_hidden_layers=12, hidden_size=768, num_attention_heads=12, intermediate_size=3072)}
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
POSITIONS = 512


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="a Hugging Face masked-LM folder; default: build one (--size)")
    parser.add_argument("--size", choices=sorted(SIZES), default="tiny", help="the model built without --model")
    # BLiMP has about 4,000 word types: a vocabulary of 4,034 holds every one whole, so no word would be split
    # and PLL-word-l2r would equal PLL. 2,000 splits 1.13 tokens a word, 117 of the default 200 sentences.
    parser.add_argument("--vocab-size", type=int, default=2000, help="the WordPiece tokenizer's vocabulary")
    parser.add_argument("--vocab-rows", type=int, default=None,
                        help="rows of the built model's embedding and output matrix, past the tokenizer's (never in "
                             "a text, in every softmax): 28996 gives bert-base-cased's projection cost")
    parser.add_argument("--init-std", type=float, default=0.02,
                        help="the built model's initializer_range (BERT's 0.02)")
    parser.add_argument("--out", default=None, help="where the built model is saved; default a temporary folder")
    parser.add_argument("--blimp-dir", default=None, help="default: $ARMLM_DATA_DIR/blimp or ../shared/data/blimp")
    parser.add_argument("--sentences", type=int, default=200, help="sentences scored, spread over the paradigms")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--tokens-per-pass", type=int, default=16384, help="armlm's (configs/zeroshot.yaml)")
    parser.add_argument("--minicons-batch", type=int, default=32, help="sentences per minicons sequence_score call")
    parser.add_argument("--minicons-by-length", action="store_true",
                        help="batch minicons' sentences in order of length (little padding); default as given")
    parser.add_argument("--threads", type=int, default=None, help="torch threads for both; default torch's")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def spread_sentences(blimp_dir: str | Path, n: int, seed: int) -> tuple[list[str], list[str]]:
    """`n` distinct sentences taken pair by pair from the paradigms in turn (in a seeded order), so a small `n`
    still reaches many paradigms; and every distinct sentence of the folder (the tokenizer's corpus)."""
    paradigms = read_blimp(blimp_dir)
    everything = sorted({s for p in paradigms for s in (*p.good, *p.bad)})
    order = list(range(len(paradigms)))
    random.Random(seed).shuffle(order)
    picked: dict[str, None] = {}  # insertion-ordered set
    for k in range(max(len(p.good) for p in paradigms)):
        for i in order:
            p = paradigms[i]
            if k < len(p.good):
                picked.update(dict.fromkeys((p.good[k], p.bad[k])))
            if len(picked) >= n:
                return list(picked)[:n], everything
    return list(picked), everything


def build_model(size: str, corpus: Sequence[str], folder: Path, vocab_size: int, init_std: float, seed: int,
                vocab_rows: int | None = None) -> Path:
    """A random-weight BertForMaskedLM and a cased WordPiece tokenizer trained on `corpus` (BERT's normaliser,
    pre-tokenizer and [CLS] $A [SEP] template), saved to `folder` as a user's downloaded model would be."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import BertConfig, BertForMaskedLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=False)  # bert-base-cased's
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()  # words, so PLL-word-l2r knows where they end
    tok.decoder = decoders.WordPiece()
    # The trainer numbers each "##" piece as it first meets it in a hash map's order, which changes from process to
    # process, and breaks ties between merges by those numbers: the vocabulary would change from run to run
    # (huggingface/tokenizers#1794). Handing it every piece first, in sorted order, fixes their numbers; they then
    # leave the added tokens (still in the vocabulary), so they are not matched in raw text as special tokens are.
    pieces = sorted({"##" + ch for text in corpus
                     for word, _ in tok.pre_tokenizer.pre_tokenize_str(tok.normalizer.normalize_str(text))
                     for ch in word[1:]})
    tok.train_from_iterator(corpus, trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=SPECIALS + pieces))
    saved = json.loads(tok.to_str())
    saved["added_tokens"] = [t for t in saved["added_tokens"] if t["content"] in SPECIALS]
    tok = Tokenizer.from_str(json.dumps(saved))
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                                       special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, model_max_length=POSITIONS, unk_token="[UNK]",
                                   cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]", mask_token="[MASK]")
    if vocab_rows is not None and vocab_rows < len(fast):
        raise ValueError(f"--vocab-rows {vocab_rows} is fewer than the tokenizer's {len(fast)} tokens")
    config = BertConfig(vocab_size=vocab_rows or len(fast), max_position_embeddings=POSITIONS,
                        pad_token_id=fast.pad_token_id, initializer_range=init_std, **SIZES[size])
    torch.manual_seed(seed)
    model = BertForMaskedLM(config).eval()
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)  # fp32 safetensors
    fast.save_pretrained(folder)
    return folder


class ArmlmSide:
    """armlm's scorer as zeroshot/run.py opens it (open_scorer), from the folder's path."""

    def __init__(self, folder: str | Path, tokens_per_pass: int) -> None:
        self.source: ModelSource = open_source(folder)
        self.scorer = SentenceScorer(self.source.backbone, self.source.reading, self.source.special.mask,
                                     tokens_per_pass=tokens_per_pass,
                                     word_boundaries=word_boundaries_known(self.source.tokenizer))

    def frames(self, texts: Sequence[str]) -> list[tuple[int, ...]]:
        return [s.ids for s in encode_sentences(self.source.tokenizer, texts, self.source.special)]

    def score(self, texts: Sequence[str], method: str) -> np.ndarray:
        sentences = encode_sentences(self.source.tokenizer, texts, self.source.special)
        return self.scorer.score(sentences, method, progress=False).log_prob


class MiniconsSide:
    """minicons' MaskedLMScorer on the same folder. minicons 0.3.39 encodes text with the tokenizer's
    `batch_encode_plus`, which transformers 5 no longer has, so this side builds the very BatchEncoding minicons'
    `encode(manual_special=False)` asks for (the tokenizer's own template, padded to the batch's longest, with an
    attention mask) and hands it to `sequence_score`, whose `prepare_text` takes a BatchEncoding as is."""

    def __init__(self, folder: str | Path, batch: int, by_length: bool = False) -> None:
        from minicons.scorer import MaskedLMScorer
        # dtype fp32: transformers 5 would otherwise load a folder in the dtype it was saved in
        self.scorer = MaskedLMScorer(str(folder), "cpu", dtype=torch.float32)
        self.batch, self.by_length = batch, by_length

    def encode(self, texts: Sequence[str]) -> Any:
        return self.scorer.tokenizer(list(texts), padding="longest", return_attention_mask=True)

    def frames(self, texts: Sequence[str]) -> list[tuple[int, ...]]:
        encoded = self.encode(texts)
        return [tuple(i for i, keep in zip(ids, mask, strict=True) if keep)
                for ids, mask in zip(encoded["input_ids"], encoded["attention_mask"], strict=True)]

    def score(self, texts: Sequence[str], metric: str, batch: int | None = None) -> np.ndarray:
        batch = batch or self.batch
        order = np.arange(len(texts))
        if self.by_length:  # the caller's choice minicons leaves open: batches of like lengths pad little
            order = np.argsort([len(ids) for ids in self.scorer.tokenizer(list(texts))["input_ids"]], kind="stable")
        ordered = [texts[i] for i in order]
        scores: list[float] = []
        for start in range(0, len(ordered), batch):
            # PLL_metric goes to sequence_score itself: its prepare_text defaults to "original" whatever the
            # scorer was built with. The sum is taken in float64, as armlm's is (minicons gives float32 per token).
            scores += self.scorer.sequence_score(self.encode(ordered[start:start + batch]), PLL_metric=metric,
                                                 reduction=lambda x: x.double().sum().item())
        result = np.empty(len(texts))
        result[order] = scores
        return result


def spread(values: Sequence[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    if args.threads:
        torch.set_num_threads(args.threads)
    blimp_dir = args.blimp_dir or str(data_dir() / "blimp")
    texts, corpus = spread_sentences(blimp_dir, args.sentences, args.seed)
    with tempfile.TemporaryDirectory(prefix="pll_minicons_") as scratch:
        if args.model:
            folder = Path(args.model)
            described = f"{folder}"
        else:
            folder = build_model(args.size, corpus, Path(args.out or scratch), args.vocab_size, args.init_std,
                                 args.seed, args.vocab_rows)
            described = f"random BertForMaskedLM ({args.size}, init std {args.init_std}) at {folder}"
        armlm = ArmlmSide(folder, args.tokens_per_pass)
        minicons = MiniconsSide(folder, args.minicons_batch, args.minicons_by_length)
        result = compare(args, texts, armlm, minicons, described)
    print(json.dumps(result))
    return result


def compare(args: argparse.Namespace, texts: list[str], armlm: ArmlmSide, minicons: MiniconsSide,
            described: str) -> dict:
    frames = armlm.frames(texts)
    # Both must read the same tokens in the same frame, or their sums would differ for a reason of the harness.
    if frames != minicons.frames(texts):
        differing = [t for t, a, b in zip(texts, frames, minicons.frames(texts), strict=True) if a != b]
        raise ValueError(f"armlm and minicons frame {len(differing)} sentences differently, e.g. {differing[0]!r}")
    # minicons leaves out of its targets every token whose id is the tokenizer's CLS, SEP or PAD; armlm scores every
    # token of the text, so a text holding one of those would be summed over different tokens.
    hf = minicons.scorer.tokenizer
    skipped = {hf.cls_token_id, hf.sep_token_id, hf.pad_token_id}
    end = len(armlm.source.special.end)
    holding = [t for t, f in zip(texts, frames, strict=True) if skipped & set(f[1:len(f) - end])]
    if holding:
        raise ValueError(f"{len(holding)} sentences hold a token minicons never scores (CLS, SEP or PAD), e.g. "
                         f"{holding[0]!r}; leave them out")
    scores: dict[str, dict[str, np.ndarray]] = {m: {} for m in args.methods}
    rates: dict[str, dict[str, list[float]]] = {m: {"armlm": [], "minicons": []} for m in args.methods}
    with torch.inference_mode():
        for method in args.methods:  # warm-up: first calls allocate and pick kernels
            armlm.score(texts[:8], method)
            minicons.score(texts[:8], METHODS[method])
        for _ in range(args.rounds):
            for method in args.methods:
                for side, run in (("armlm", lambda: armlm.score(texts, method)),
                                  ("minicons", lambda: minicons.score(texts, METHODS[method]))):
                    started = time.perf_counter()
                    scores[method][side] = run()
                    rates[method][side].append(len(texts) / (time.perf_counter() - started))
    source = armlm.source
    tokens = [len(f) - 1 - len(source.special.end) for f in frames]  # targets: every token but the frame's
    batched = sorted(frames, key=len) if args.minicons_by_length else frames  # as minicons' batches hold them
    padded = sum(len(batched[i:i + args.minicons_batch]) * max(map(len, batched[i:i + args.minicons_batch]))
                 for i in range(0, len(texts), args.minicons_batch))
    print(f"{described}: {type(source.backbone.lm).__name__}, {source.backbone.config.n_layers} layers, d_model "
          f"{source.backbone.config.d_model}, V {source.vocab_size:,}; {len(texts)} BLiMP sentences of "
          f"{np.mean(tokens):.2f} scored tokens on average ({min(tokens)}-{max(tokens)}); {args.rounds} rounds, "
          f"{torch.get_num_threads()} threads, fp32; armlm {args.tokens_per_pass} tokens a pass, minicons "
          f"{args.minicons_batch} sentences a call{' in order of length' if args.minicons_by_length else ''} "
          f"(padding adds {padded / sum(map(len, frames)) - 1:.0%} tokens)")
    equality, rows = {}, {}
    for method in args.methods:
        gap = np.abs(scores[method]["armlm"] - scores[method]["minicons"])
        over = [{"sentence": texts[i], "armlm": float(scores[method]["armlm"][i]),
                 "minicons": float(scores[method]["minicons"][i]), "difference": float(gap[i])}
                for i in np.flatnonzero(gap > TOLERANCE)]
        equality[method] = {"max_abs_difference": float(gap.max()), "equal": not over, "over_tolerance": over,
                            "mean_log_prob": float(scores[method]["armlm"].mean())}
        verdict = "equal" if not over else f"{len(over)} sentences over {TOLERANCE:g}"
        print(f"{method} (minicons PLL_metric={METHODS[method]!r}): max |armlm - minicons| = {gap.max():.2e} over "
              f"{len(texts)} sentences ({verdict}); mean PLL {scores[method]['armlm'].mean():.4f}")
        for row in over[:10]:
            print(f"  {row['difference']:.2e}: armlm {row['armlm']:.6f}, minicons {row['minicons']:.6f}: "
                  f"{row['sentence']!r}")
        # minicons again, one sentence a call: no padding, so no attention mask. How far that moves minicons from
        # its own batches is fp32's rounding in its padded path, the floor a difference from armlm is read against.
        with torch.inference_mode():
            alone = minicons.score(texts, METHODS[method], batch=1)
        itself, unpadded = (float(np.abs(alone - scores[method]["minicons"]).max()),
                            float(np.abs(alone - scores[method]["armlm"]).max()))
        relative = float((gap / np.abs(scores[method]["minicons"])).max())
        equality[method].update(minicons_against_itself=itself, armlm_against_minicons_unpadded=unpadded,
                                max_relative_difference=relative)
        print(f"  minicons one sentence a call (no padding): {itself:.2e} from its own batches of "
              f"{args.minicons_batch}, {unpadded:.2e} from armlm; largest relative difference {relative:.1e}")
        ratio = [a / b for a, b in zip(rates[method]["armlm"], rates[method]["minicons"], strict=True)]
        rows[method] = {"armlm": spread(rates[method]["armlm"]), "minicons": spread(rates[method]["minicons"]),
                        "ratio": spread(ratio)}
    if set(METHODS) <= set(args.methods):  # the two methods must differ, or the word-l2r check would be vacuous
        apart = float(np.abs(scores["pll"]["armlm"] - scores["pll_word_l2r"]["armlm"]).max())
        print(f"pll and pll_word_l2r differ by up to {apart:.4f} per sentence (armlm)")
    else:
        apart = None
    print("\n| method | armlm sentences/s (min-max) | minicons sentences/s (min-max) | armlm / minicons (min-max) |\n"
          "|---|---|---|---|")
    for method, r in rows.items():
        cells = [f"{r[k]['median']:.1f} ({r[k]['min']:.1f}-{r[k]['max']:.1f})" for k in ("armlm", "minicons")]
        print(f"| {method} | {cells[0]} | {cells[1]} | {r['ratio']['median']:.2f} ({r['ratio']['min']:.2f}-"
              f"{r['ratio']['max']:.2f}) |")
    return {"model": described, "n_layers": source.backbone.config.n_layers,
            "d_model": source.backbone.config.d_model, "vocab_size": source.vocab_size, "sentences": len(texts),
            "mean_tokens": float(np.mean(tokens)), "threads": torch.get_num_threads(), "rounds": args.rounds,
            "tokens_per_pass": args.tokens_per_pass, "minicons_batch": args.minicons_batch,
            "minicons_by_length": args.minicons_by_length, "padding_share": padded / sum(map(len, frames)) - 1,
            "tolerance": TOLERANCE,
            "equality": equality, "methods_apart": apart, "rows": rows}


if __name__ == "__main__":
    main()
