"""Writers of the artefacts a study's stages leave in <root>/<arm>/seed<k>/, in the shapes the report code reads
(analysis.tables.study_tables, analysis.findings.items, analysis.reports.blimp_report, analysis.reports.embeddings_report, analysis.reports.curves_report): each
built from a few numbers, so tests.helpers.synthetic_studies can say what a fixture study measured and the goldens
show it. Nothing written names the study's root, so a fixture generated in two folders holds the same bytes."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from armlm.common.scalars import SCALARS_CSV, write_scalars_csv
from armlm.finetune.artefacts import ITEMS_FILE
from armlm.zeroshot.blimp import Paradigm, accuracy_table, published_beside
from armlm.zeroshot.run import pair_bits
from tests.helpers.findings import write

# objective -> its val/loss kind and whether its validation loss is an exact likelihood (val_likelihood)
OBJECTIVES = {"AutoregressiveLM": ("next_token", True), "MaskedLM": ("masked_token", False),
              "HybridLM": ("mixed_next_token", False)}
CODE = "5e7d1c0a9b8f6e4d3c2b1a0f9e8d7c6b5a4f3e2d"  # the commit the synthetic runs "ran on"
FLOPS_PER_TOKEN = 6 * 3.0e6  # a 3M-parameter model
WORDS_PER_TOKEN = 0.75
UNIGRAM = 6.0  # the unigram NLL of the validation targets, every run's
# BLiMP paradigms (uid, field, phenomenon) and the release's per-paradigm accuracies (Warstadt et al. 2020's
# models_summary: 5-gram, LSTM, Transformer-XL, GPT-2), which zeroshot.json averages over the paradigms scored
PARADIGMS = [Paradigm(uid, field, term, (), ()) for uid, field, term in (  # accuracy_table reads no sentence
    ("adjunct_island", "syntax", "island_effects"), ("anaphor_gender_agreement", "morphology", "anaphor_agreement"),
    ("animate_subject_passive", "syntax_semantics", "s-selection"),
    ("determiner_noun_agreement_1", "morphology", "determiner_noun_agreement"),
    ("existential_there_quantifiers_1", "semantics", "quantifiers"),
    ("expletive_it_object_raising", "syntax", "control_raising"))]
PUBLISHED = {uid: dict(zip(("5-gram", "LSTM", "Transformer-XL", "GPT-2"), scores)) for uid, scores in (
    ("adjunct_island", (0.479, 0.674, 0.645, 0.894)), ("anaphor_gender_agreement", (0.439, 0.882, 0.912, 0.994)),
    ("animate_subject_passive", (0.703, 0.715, 0.743, 0.766)),
    ("determiner_noun_agreement_1", (0.883, 0.918, 0.917, 0.988)),
    ("existential_there_quantifiers_1", (0.905, 0.963, 0.937, 0.995)),
    ("expletive_it_object_raising", (0.715, 0.630, 0.715, 0.792)))}
# how each paradigm sits around a model's overall accuracy (zero mean: the overall is the one asked for)
PARADIGM_OFFSETS = dict(zip((p.uid for p in PARADIGMS), (-0.08, 0.04, -0.02, 0.12, 0.06, -0.12)))


def run(root: Path, arm: str, seed: int, *stage: str) -> Path:
    return root.joinpath(arm, f"seed{seed}", *stage)


def stage_record(folder: Path, kind: str, seconds: float | None, running: bool = False) -> None:
    """The runner's stage.json: wall seconds over its launches (None: kept no time); `running`: a launch out."""
    write(folder / "stage.json", {"seconds": seconds, "kind": kind, "launches": 1,
                                  "started_at": 1_764_583_200.0 if running else None})  # epoch seconds


def pretraining(root: Path, arm: str, seed: int, objective: str, val_loss: float, own: float, *,
                tokens: int = 2_000_000, seconds: float = 600.0, scalars: bool = True,
                branch_from: tuple[str, int] | None = None) -> None:
    """summary.json (train.py's keys), stage.json and, with `scalars`, the validation curve the learning-curves
    figure reads. `own`: the own held-out loss's margin below the unigram NLL (the learning gate's);
    `branch_from`: (trunk arm, tokens) of a cooldown branch."""
    unigram = UNIGRAM
    folder = run(root, arm, seed, "pretrain")
    kind, exact = OBJECTIVES[objective]
    predicted = tokens if exact else int(tokens * 0.15)
    # the trunk's run folder as a study on another machine named it: its arm is the folder's third part from the end
    trunk = {"trunk": f"/runs/{branch_from[0]}/seed{seed}/pretrain", "tokens": branch_from[1]} if branch_from else None
    metrics = {"val/loss": val_loss, "val/own_unigram": unigram, "val/own_below_unigram": own}
    if objective == "MaskedLM":
        metrics["val/mask_share"] = 0.12
    write(folder / "summary.json", {
        "objective": objective, "steps": tokens // 2048, "tokens_seen": tokens, "pred_tokens_seen": predicted,
        "val_loss": val_loss, "val_loss_kind": kind, "val_ppl": math.exp(val_loss), "unigram_baseline": unigram,
        "own_below_unigram": {"all": own}, "val_likelihood": val_loss if exact else None,
        "val_likelihood_tag": "val/loss" if exact else None, "flops_seen": FLOPS_PER_TOKEN * tokens,
        "words_seen": tokens * WORDS_PER_TOKEN, "branch_from": trunk, "epochs": 1.0, "max_train_tokens": None,
        "wall_seconds": seconds, "precision": "32-true", "code": CODE, "metrics": metrics})
    stage_record(folder, "pretrain", seconds)
    if scalars:  # four validations, the loss falling from above the unigram NLL to the summary's
        at = np.arange(1, 5) / 4
        frame = pd.DataFrame({"train/tokens_seen": at * tokens, "train/pred_tokens_seen": at * predicted,
                              "val/loss": val_loss + (unigram + 0.5 - val_loss) * (1 - at) ** 2},
                             index=pd.Index((at * tokens // 2048).astype(int), name="step"))
        write_scalars_csv(frame, folder / SCALARS_CSV)


def entity_counts(rng: np.random.Generator, gold: np.ndarray, recall: float) -> np.ndarray:
    """(sentences, 3) tp, fp, fn of a tagger finding about `recall` of each dev sentence's `gold` entities."""
    tp = rng.binomial(gold, recall)
    return np.stack([tp, rng.binomial(1, 0.25, size=len(gold)), gold - tp], axis=1)


def moved(counts: np.ndarray, units: int, rng: np.random.Generator | None = None) -> np.ndarray:
    """`counts` with `units` missed entities found (units < 0: found ones missed), in sentences drawn by `rng` or,
    without it, all in the first sentence that has them: a gain spread over the dev set, or one that a resample of
    the sentences leaves out about a third of the time (the item test cannot rely on it)."""
    out = counts.copy()
    source, target = (2, 0) if units > 0 else (0, 2)  # fn -> tp, or tp -> fn
    for _ in range(abs(units)):
        able = np.flatnonzero(out[:, source] > 0)
        at = able[0] if rng is None else rng.choice(able)
        out[at, source] -= 1
        out[at, target] += 1
    return out


def f1_scores(counts: np.ndarray) -> dict[str, float]:
    """Micro F1 (the primary metric), precision and recall over the sentences' counts, as finetune.metrics scores."""
    tp, fp, fn = counts.sum(axis=0)
    return {"f1": 2 * tp / (2 * tp + fp + fn), "precision": tp / (tp + fp), "recall": tp / (tp + fn)}


def finetuning(root: Path, arm: str, seed: int, task_variant: str, metrics: dict[str, float], *,
               baseline: float = 0.0, attention: str = "bidirectional", seconds: float | None = None) -> Path:
    """results.json of one fine-tuning run on the validation split (the first metric is the task's primary one),
    and its stage.json where `seconds` are given (each stage writer's, below, alike). Returns the run folder."""
    task, _, variant = task_variant.partition("-")
    folder = run(root, arm, seed, "finetune", task_variant)
    write(folder / "results.json", {
        "task": task, "primary_metric": next(iter(metrics)), "seed": seed,
        "mode": "features" if variant in ("features", "last", "mix", "static") else "full",
        "attention": attention,
        "metrics": {"validation": metrics}, "majority_baseline": {"validation": {k: baseline for k in metrics}},
        "input_mask_share": 0.0})
    if seconds is not None:
        stage_record(folder, "finetune", seconds)
    return folder


def tagging(root: Path, arm: str, seed: int, task_variant: str, epochs: list[np.ndarray],
            documents: list[int] | None = None, **run: Any) -> None:
    """A CoNLL-2003 run scored from its dev sentences' entity counts after each epoch: results.json (the last
    epoch's micro F1, precision and recall), items.json (every epoch's counts, and each sentence's document where
    `documents` gives them) and, for more than one epoch, the dev F1 logged at each epoch's end (scalars.csv), which an
    `epoch:` side reads. `run`: finetuning's settings."""
    folder = finetuning(root, arm, seed, task_variant, f1_scores(epochs[-1]), **run)
    clusters = {} if documents is None else {"clusters": {"validation": list(documents)}}
    write(folder / ITEMS_FILE, {"task": "conll2003",
                                "metrics": {"entities": {"statistics": ["tp", "fp", "fn"], "score": "f1"}},
                                "splits": {"validation": {"entities": [c.tolist() for c in epochs]}}, **clusters})
    if len(epochs) > 1:
        frame = pd.DataFrame({"epoch": range(len(epochs)), "conll2003/val/f1": [f1_scores(c)["f1"] for c in epochs]},
                             index=pd.Index([100 * (k + 1) for k in range(len(epochs))], name="step"))
        write_scalars_csv(frame, folder / SCALARS_CSV)


def likelihood(nll: float, unigram: float, kind: str = "exact", mc_stderr: float = 0.0) -> dict[str, Any]:
    """`armlm evaluate`'s likelihood section: held-out NLL per non-[EOD] target beside the unigram NLL of the same."""
    return {"kind": kind, "nll_per_token": nll, "nll_per_token_without_eod": nll, "ppl": math.exp(nll),
            "unigram_nll_per_token_without_eod": unigram, "below_unigram": unigram - nll, "mc_stderr": mc_stderr,
            "blocks_fingerprint": "2557354c86e7342e", "blocks": 64, "block_size": 64}


def pairwise(joint: str, gaps: list[float], p_ppl: float, u_ppl: float) -> dict[str, Any]:
    """One pair kind of the independence diagnostics: a pair at each distance 1, 2, ... with its gap."""
    distances = list(range(1, len(gaps) + 1))
    return {"headline_joint": joint, "rows": {joint: {"p_ppl": p_ppl, "u_ppl": u_ppl}},
            "gap_mean": {joint: float(np.mean(gaps))},
            "gap_by_distance": [{"low": d, "distance": str(d), "pairs": 1, "mean_gap": g}
                                for d, g in zip(distances, gaps)],
            "per_pair": {"distance": distances, "gap": {joint: gaps}}}


def representations(shift: list[float], shift_left: list[float], anisotropy: list[float]) -> dict[str, Any]:
    """Representation shift at k=0.4 (cosine; CKA a little below it) and geometry, a layer per value."""
    def rows(cosines: list[float]) -> list[dict[str, Any]]:
        return [{"layer": k, "cosine": c, "cka": c - 0.05} for k, c in enumerate(cosines, 1)]

    return {"shift": {"0.4": rows(shift)}, "shift_left": {"0.4": rows(shift_left)},
            "geometry": [{"layer": k, "anisotropy_raw": a, "anisotropy_centred": a / 10,
                          "anisotropy_standardised": a / 8, "self_similarity_same_type": 0.8,
                          "self_similarity_different_types": a}
                         for k, a in enumerate(anisotropy, 1)]}


def diagnostics(root: Path, arm: str, seed: int, **sections: Any) -> None:
    """diagnostics.json of exact scoring (candidates None) with the given sections (likelihood, pairwise, ...)."""
    write(run(root, arm, seed, "diagnostics", "diagnostics.json"), {"candidates": None, **sections})


def pair_outcomes(rng: np.random.Generator, accuracy: float, pairs: int, spread: float = 1.0
                  ) -> dict[str, np.ndarray]:
    """Per paradigm, a bool per pair (the good sentence preferred): round(p * pairs) of them in an order drawn by
    `rng`, p the paradigm's PARADIGM_OFFSETS around `accuracy` plus a draw of its own, both times `spread` (a model
    that guesses has none)."""
    out = {}
    for uid, offset in PARADIGM_OFFSETS.items():
        p = accuracy + spread * (offset + rng.normal(0, 0.04))
        out[uid] = rng.permutation(np.arange(pairs) < round(min(max(p, 0.0), 1.0) * pairs))
    return out


def rescored(rng: np.random.Generator, outcomes: dict[str, np.ndarray], gain: float) -> dict[str, np.ndarray]:
    """The same model's outcomes under another scoring method: in each paradigm about `gain` of its pairs, lost
    before, now won (one more or fewer, drawn), the rest as they were, so the two methods' scores pair closely."""
    out = {}
    for uid, won in outcomes.items():
        lost = np.flatnonzero(~won)
        turned = rng.choice(lost, size=min(len(lost), max(0, round(gain * len(won)) + rng.integers(-1, 2))),
                            replace=False)
        out[uid] = won.copy()
        out[uid][turned] = True
    return out


def zeroshot(root: Path, arm: str, seed: int, outcomes: dict[str, dict[str, np.ndarray]], kept: tuple[str, ...]
             ) -> Path:
    """zeroshot.json as zeroshot.run writes it: per method the accuracy table (zeroshot.blimp's, its bootstrap over
    pairs, and its ties: each paradigm's first pair where it was lost), each pair's outcome and tie for the methods in
    `kept` (the others as a report written before they were kept), and the release's models over the same
    paradigms."""
    folder = run(root, arm, seed, "zeroshot")
    ties = {m: {u: (np.arange(len(won)) == 0) & ~won for u, won in by_uid.items()} for m, by_uid in outcomes.items()}
    results = {m: accuracy_table(PARADIGMS, by_uid, resamples=1000, seed=seed, ties=ties[m])
               for m, by_uid in outcomes.items()}
    write(folder / "zeroshot.json", {"blimp": {
        "paradigms": len(PARADIGMS), "results": results,
        "pair_outcomes": {m: pair_bits(outcomes[m]) for m in kept}, "pair_ties": {m: pair_bits(ties[m]) for m in kept},
        "published": [{"level": level, "name": name, **scores}
                      for (level, name), scores in published_beside(PARADIGMS, PUBLISHED).items()]}})
    return folder


def word_scores(simlex: float, wordsim: float, semantic: float, syntactic: float, rare: float) -> dict[str, Any]:
    """One layer's (or a static method's) word-benchmark scores, as `armlm embeddings` writes them."""
    return {"simlex999": {"spearman": simlex, "pairs": 496, "rare_spearman": rare, "rare_pairs": 852},
            "wordsim353": {"spearman": wordsim, "pairs": 233},
            "analogies": {"semantic": {"accuracy": semantic, "questions": 570},
                          "syntactic": {"accuracy": syntactic, "questions": 3153},
                          "overall": {"accuracy": (570 * semantic + 3153 * syntactic) / 3723, "questions": 3723}}}


def words(root: Path, arm: str, seed: int, layers: dict[str, dict[str, Any]], kind: str, seconds: float) -> None:
    """words.json of a static method (layer "static") or a checkpoint (layers "0", "1", ...), and its stage.json."""
    folder = run(root, arm, seed, "embed")
    write(folder / "words.json", {"kind": kind, "seed": seed, "layers": layers})
    stage_record(folder, "embed", seconds)
