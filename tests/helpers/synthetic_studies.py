"""Synthetic study folders, one per report kind, that the golden tables of tests/test_records_reports.py are written
from: each generator writes a small study (2-3 arms x 2-3 seeds) of the artefacts its reports read
(tests.helpers.synthetic_artefacts) and returns the study config they are written with: its arms, and the findings
family, gate and item test it registers. Every number is set here or drawn from a numpy Generator seeded here, so a
golden table moves only when the report code does; what each study is built to show is in its docstring."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from tests.helpers import synthetic_artefacts as A
from tests.helpers.findings import registered

Study = dict[str, Any]
F1 = {"finetune": "conll2003-full", "metric": "f1"}


def finding(claim: str, a: dict[str, Any], b: dict[str, Any], kind: str = "superiority", effect: float = 0.02,
            margin: float = 0.0, direction: str = "greater", **more: Any) -> dict[str, Any]:
    """A registered finding (tests.helpers.findings.registered) with its claim; `more`: further keys of its
    registration (superseded), or a `registered` of its own (seeds, seen)."""
    return {**registered({"claim": claim, "a": a, "b": b, "direction": direction}, kind, effect, margin), **more}


def findings_study(root: Path) -> Study:
    """The study report and a findings family of every verdict, 3 seeds: CoNLL-2003 F1 from items.json, where MLM's
    gain over AR is spread over the dev sentences (reproduced by the crossed interval) and the AR checkpoint's gain
    from bidirectional fine-tuning sits in one sentence (seeds alone say reproduced; the crossed interval, which
    counts the sentences, holds it back); SST-2
    accuracies within an equivalence margin (reproduced); frozen features far below fine-tuning against a
    non-inferiority margin (contradicted); a noisy representation shift (unresolved); and an arm whose own loss
    fails the gate in seed 2 (not evidence). Diagnostics fill the likelihood, independence and representation
    tables; a check is reported beside them."""
    rng = np.random.default_rng(741)
    gold = rng.integers(0, 5, size=80)  # entities per dev sentence, the same split for every run
    gold[0] = 40  # one long sentence, where the one-sentence gain lands
    for seed in (1, 2, 3):
        A.pretraining(root, "ar", seed, "AutoregressiveLM", 4.30 - 0.02 * seed, 1.70 + 0.02 * seed)
        A.pretraining(root, "mlm", seed, "MaskedLM", 3.70 + 0.01 * seed, 2.13 - 0.01 * seed)
        A.pretraining(root, "stalled", seed, "MaskedLM", 5.40, (1.40, 0.30, 1.50)[seed - 1])
        ar = A.entity_counts(rng, gold, 0.60)
        mlm = A.moved(ar, 14, rng)
        for arm, variant, counts in (("ar", "full", ar), ("ar", "bidirectional", A.moved(ar, 8)),
                                     ("mlm", "full", mlm), ("mlm", "features", A.moved(mlm, -30, rng)),
                                     ("stalled", "full", A.moved(ar, 12, rng))):
            A.tagging(root, arm, seed, f"conll2003-{variant}", [counts], seconds=300.0,
                      attention="causal" if (arm, variant) == ("ar", "full") else "bidirectional")
        sst2 = 0.800 + 0.004 * seed
        A.finetuning(root, "ar", seed, "sst2-full", {"accuracy": sst2}, baseline=0.509)
        A.finetuning(root, "mlm", seed, "sst2-full", {"accuracy": sst2 + (0.002, -0.001, 0.003)[seed - 1]},
                     baseline=0.509)
        # AR's gap falls with distance, MLM's (its joint a construction, not exact) stays flatter
        for arm, nll, joint, gaps, ppl, shift, anisotropy in (
                ("ar", 4.35, "ar_exact", [0.8, 0.3, 0.1], (30.0, 27.0), (0.95, 0.90 + (0.02, -0.01, 0.03)[seed - 1]),
                 [0.09, 0.20]),
                ("mlm", 4.90, "mrf", [0.6, 0.5, 0.4], (22.0, 18.0), (0.97, 0.91 + 0.005 * seed), [0.05, 0.12])):
            A.diagnostics(root, arm, seed, likelihood=A.likelihood(nll - 0.01 * seed, 6.2, "exact" if arm == "ar"
                                                                   else "bound", 0.0 if arm == "ar" else 0.02),
                          pairwise={"random": A.pairwise(joint, [g + 0.02 * seed for g in gaps], ppl[0] + seed,
                                                         ppl[1])},
                          representations=A.representations(list(shift), [s - 0.02 for s in shift], anisotropy),
                          sequence={"ppl": 60.0 + seed} if arm == "ar" else {"pseudo_ppl": 12.0 + seed})
    return {"name": "synthetic_findings", "alpha": 0.05, "gate": {"own_below_unigram": 0.5, "min_above_majority": 0.05},
            "arms": {"ar": {"pretrain": ["objective=ar"]}, "mlm": {"pretrain": ["objective=mlm"]},
                     "stalled": {"pretrain": ["objective=mlm"]}},
            "findings": {
                "F1": finding("MLM tags CoNLL-2003 better than AR, each fine-tuned as it is used",
                              {"arm": "mlm", **F1}, {"arm": "ar", **F1}),
                "F1_mask": finding("the AR checkpoint tags better fine-tuned bidirectionally",
                                   {"arm": "ar", **F1, "finetune": "conll2003-bidirectional"}, {"arm": "ar", **F1},
                                   registered={"date": "2026-11-25", "commit": "abc1234", "seen": "seed 1 of ar"}),
                "SST2_tie": finding("MLM and AR classify SST-2 equally well (within 2 points)",
                                    {"arm": "mlm", "finetune": "sst2-full", "metric": "accuracy"},
                                    {"arm": "ar", "finetune": "sst2-full", "metric": "accuracy"}, "equivalence", 0.02,
                                    0.02),
                "features": finding("MLM's frozen features tag within 2 points of fine-tuning",
                                    {"arm": "mlm", **F1, "finetune": "conll2003-features"}, {"arm": "mlm", **F1},
                                    "non_inferiority", 0.02, 0.02),
                "shift": finding("masking shifts AR's last layer less than MLM's",
                                 *({"arm": arm, "representation": {"measure": "shift_cosine@0.4", "layer": "last"}}
                                   for arm in ("ar", "mlm")), effect=0.01,
                                 superseded=[{"test": {"kind": "superiority", "smallest_effect": 0.05},
                                              "registered": {"date": "2026-11-20", "commit": "0a1b2c3"},
                                              "why": "0.05 was the cosine's range, not an effect"}]),
                "stalled": finding("the stalled MLM tags better than AR", {"arm": "stalled", **F1},
                                   {"arm": "ar", **F1})},
            "checks": {"mlm_learned": {"what": "MLM's validation loss below the unigram NLL",
                                       "value": {"arm": "mlm", "pretraining": "below_unigram"}}}}


def items_study(root: Path) -> Study:
    """Item intervals, 2 of 3 registered seeds: CoNLL-2003 rows read after epoch 1 and 3 (items.json's counts
    after each epoch, the dev F1 in scalars.csv) and at the results' last epoch, over the dev documents (four sentences
    each, kept in items.json); BLiMP rows over pairs within paradigms (zeroshot.json's pair_outcomes) and over
    paradigms only (a method whose outcomes were not kept). One row registers seed 3, so it is interim, and Holm's family waits with it."""
    rng = np.random.default_rng(742)
    gold = rng.integers(0, 5, size=60)
    for seed in (1, 2):
        A.pretraining(root, "ar", seed, "AutoregressiveLM", 4.2, 1.8, scalars=False)
        A.pretraining(root, "mlm", seed, "MaskedLM", 3.7, 2.1, scalars=False)
        ar = A.entity_counts(rng, gold, 0.65)
        mlm = A.moved(ar, 4, rng)  # after the last epoch, 4 more entities found than AR
        # each earlier epoch misses `late`, then `early`, more: MLM starts well ahead and AR almost catches up
        for arm, final, late, early in (("ar", ar, 8, 15), ("mlm", mlm, 4, 5)):
            second = A.moved(final, -late, rng)
            A.tagging(root, arm, seed, "conll2003-full", [A.moved(second, -early, rng), second, final],
                      documents=[k // 4 for k in range(len(gold))])
        A.zeroshot(root, "ar", seed, {"exact": A.pair_outcomes(rng, 0.70 + 0.01 * seed, 50)}, kept=("exact",))
        pll = A.pair_outcomes(rng, 0.68, 50)
        A.zeroshot(root, "mlm", seed, {"pll": pll, "pll_word_l2r": A.rescored(rng, pll, 0.04)}, kept=("pll",))
    mlm_f1, ar_f1 = {"arm": "mlm", **F1}, {"arm": "ar", **F1}
    seeds = {"date": "2026-11-26", "commit": "abc1234", "seeds": [1, 2, 3]}
    return {"name": "synthetic_items", "alpha": 0.05, "gate": {"own_below_unigram": 0.5},
            "item_test": {"items": "CoNLL-2003 dev documents; BLiMP pairs within paradigms", "draws": 2000, "seed": 0},
            "arms": {"ar": {"pretrain": ["objective=ar"]}, "mlm": {"pretrain": ["objective=mlm"]}},
            "findings": {
                "F1@epoch1": finding("MLM tags better after one epoch (a head start)", {**mlm_f1, "epoch": 1},
                                     {**ar_f1, "epoch": 1}),
                "F1@epoch3": finding("MLM tags better after three epochs", {**mlm_f1, "epoch": 3},
                                     {**ar_f1, "epoch": 3}, registered=seeds),
                "F1": finding("MLM tags better at the end of fine-tuning", mlm_f1, ar_f1),
                "Z1": finding("MLM's PLL ranks BLiMP pairs at least as well as AR's exact log-probability",
                              {"arm": "mlm", "zeroshot": {"method": "pll"}},
                              {"arm": "ar", "zeroshot": {"method": "exact"}}, "non_inferiority", 0.02, 0.02),
                "Z2": finding("PLL-word-l2r ranks BLiMP pairs better than PLL",
                              {"arm": "mlm", "zeroshot": {"method": "pll_word_l2r"}},
                              {"arm": "mlm", "zeroshot": {"method": "pll"}}, effect=0.005)}}


def blimp_study(root: Path) -> Study:
    """BLiMP tables, 3 arms x 3 seeds over six paradigms of four fields, the release's models beside them
    (zeroshot.json's `published`), and a findings family judged over seeds and pairs: PLL against exact scoring
    (non-inferiority), PLL-word-l2r against PLL on the same outcomes rescored (superiority), and an arm whose
    preferences are coin flips, which the min_discrimination gate marks not evidence."""
    rng = np.random.default_rng(743)
    for seed in (1, 2, 3):
        jitter = (0.0, 0.02, 0.01)[seed - 1]
        for arm, objective in (("ar", "AutoregressiveLM"), ("mlm", "MaskedLM"), ("guess", "MaskedLM")):
            A.pretraining(root, arm, seed, objective, 4.0, 1.9, scalars=False)
        A.zeroshot(root, "ar", seed, {"exact": A.pair_outcomes(rng, 0.72 + jitter, 50)}, kept=("exact",))
        pll = A.pair_outcomes(rng, 0.70 + jitter, 50)
        A.zeroshot(root, "mlm", seed, {"pll": pll, "pll_word_l2r": A.rescored(rng, pll, 0.03)},
                   kept=("pll", "pll_word_l2r"))
        A.zeroshot(root, "guess", seed, {"pll": A.pair_outcomes(rng, 0.5, 50, spread=0.5)}, kept=("pll",))
    pll = {"arm": "mlm", "zeroshot": {"method": "pll"}}
    return {"name": "synthetic_blimp", "alpha": 0.05,
            "gate": {"own_below_unigram": 0.5, "min_discrimination": {"alpha": 0.05}},
            "item_test": {"items": "BLiMP pairs within paradigms", "draws": 2000, "seed": 0},
            "arms": {arm: {"pretrain": [f"objective={o}"]}
                     for arm, o in (("ar", "ar"), ("mlm", "mlm"), ("guess", "mlm"))},
            "findings": {
                "Z1": finding("MLM's PLL ranks BLiMP pairs at least as well as AR's exact log-probability", pll,
                              {"arm": "ar", "zeroshot": {"method": "exact"}}, "non_inferiority", 0.02, 0.02),
                "Z2": finding("PLL-word-l2r ranks BLiMP pairs better than PLL",
                              {"arm": "mlm", "zeroshot": {"method": "pll_word_l2r"}}, pll, effect=0.005),
                "Z3": finding("the guessing arm ranks BLiMP pairs as well as MLM", {**pll, "arm": "guess"}, pll,
                              "non_inferiority", 0.02, 0.02)}}


def embeddings_study(root: Path) -> Study:
    """The embeddings table, 3 seeds: words.json of a static method (its vectors) and of two checkpoints (a row per
    layer), beside NER on their frozen features (last layer, scalar mix) and on the static vectors. The checkpoints'
    gate margins come from their diagnostics (they read another study's runs); the static arm is not gated. Two
    findings read word benchmarks: static SimLex above a checkpoint's layer (reproduced) and a noisy analogy row."""
    rng = np.random.default_rng(744)

    def drawn(mean: float, sd: float = 0.02) -> float:
        return float(mean + rng.normal(0, sd))

    for seed in (1, 2, 3):
        A.words(root, "word2vec", seed, {"static": A.word_scores(drawn(0.30), drawn(0.40), drawn(0.05, 0.01),
                                                                 drawn(0.03, 0.01), drawn(0.01))}, "static", 240.0)
        A.finetuning(root, "word2vec", seed, "conll2003-static", {"f1": drawn(0.18)})
        for arm, simlex, syntactic, ner in (("ar", 0.10, 0.50, 0.25), ("mlm", 0.13, 0.45, 0.28)):
            A.words(root, arm, seed, {str(k): A.word_scores(drawn(simlex - 0.03 * k), drawn(0.2 - 0.02 * k),
                                                            drawn(0.005, 0.002), drawn(syntactic + 0.03 * k, 0.05),
                                                            drawn(-0.02 - 0.01 * k)) for k in range(3)}, "contextual",
                    90.0)
            A.diagnostics(root, arm, seed, pretraining={"own_below_unigram": {"all": drawn(2.0, 0.1)}})
            for variant, gain in (("last", 0.0), ("mix", -0.02)):
                A.finetuning(root, arm, seed, f"conll2003-{variant}", {"f1": drawn(ner + gain)})
    simlex = {"benchmark": "simlex999", "metric": "spearman"}
    return {"name": "synthetic_embeddings", "alpha": 0.05, "gate": {"own_below_unigram": 0.5},
            "arms": {"word2vec": {"gate": False}, "ar": {}, "mlm": {}},
            "findings": {
                "W1": finding("static vectors rank SimLex pairs better than MLM's last layer",
                              {"arm": "word2vec", "words": {**simlex, "layer": "static"}},
                              {"arm": "mlm", "words": {**simlex, "layer": 2}}, effect=0.05),
                "W2": finding("AR's first layer answers syntactic analogies better than MLM's",
                              *({"arm": arm, "words": {"benchmark": "analogies", "metric": "syntactic", "layer": 1}}
                                for arm in ("ar", "mlm")))}}


# line -> its objective, its BLiMP methods, and per budget its BLiMP overall (None: no point there) and validation NLL
CURVE_LINES = {"ar": ("AutoregressiveLM", ("exact",), (0.66, 0.68, 0.74), (4.6, 4.3, 4.0)),
               "mlm": ("MaskedLM", ("pll",), (0.60, 0.66, 0.71), (5.2, 4.9, 4.5)),
               "hybrid": ("HybridLM", ("exact", "pll"), (0.58, None, 0.69), (5.0, None, 4.3))}
BUDGETS = {"w1m": 1_333_333, "w2m": 2_666_667, "w4m": 5_333_333}  # input tokens of about 1, 2 and 4M words


def curves_study(root: Path) -> Study:
    """A curves study: AR and MLM at three budgets in words (2 seeds), the hybrid at two (1 seed, its BLiMP cells
    with the interval over pairs), AR's 2M-word point a cooldown branch of its 4M-word run (its cost with the trunk's
    share). Each point has its held-out likelihood, BLiMP by every method it ran (crossing the release's 5-gram by
    the largest budget), CoNLL-2003 F1 and pretraining times; a zero-shot launch still out is left out of the
    costs."""
    rng = np.random.default_rng(746)
    arms = {}
    for prefix, (objective, methods, blimp, nll) in CURVE_LINES.items():
        for k, (budget, tokens) in enumerate(BUDGETS.items()):
            if blimp[k] is None:
                continue
            arm = f"{prefix}_{budget}"
            branch = ("ar_w4m", int(0.8 * tokens)) if arm == "ar_w2m" else None  # decays from 80 %
            arms[arm] = {"pretrain": [f"objective={prefix}"], **({"branch_of": "ar_w4m"} if branch else {})}
            for seed in (1, 2) if prefix != "hybrid" else (1,):
                noise = rng.normal(0, 0.03, size=3)  # the seed's own: its loss, margin and BLiMP
                A.pretraining(root, arm, seed, objective, nll[k] + noise[0], 1.0 + 0.4 * k + noise[1], tokens=tokens,
                              seconds=(200.0 if branch else 400.0) * (k + 1) + 10 * seed, branch_from=branch)
                A.diagnostics(root, arm, seed, likelihood=A.likelihood(nll[k] + 0.1 + noise[0], 6.4))
                scored = A.zeroshot(root, arm, seed, {m: A.pair_outcomes(rng, blimp[k] - 0.02 * j + noise[2] / 3, 50)
                                                      for j, m in enumerate(methods)}, kept=methods)
                if (arm, seed) == ("mlm_w4m", 2):  # a relaunch of a scored stage, still out
                    A.stage_record(scored, "zeroshot", 45.0, running=True)
                A.finetuning(root, arm, seed, "conll2003-full", {"f1": 0.55 + 0.03 * k + blimp[k] / 10 + noise[2]})
    return {"name": "synthetic_curves", "arms": arms}


STUDIES: dict[str, Callable[[Path], Study]] = {"findings": findings_study, "items": items_study, "blimp": blimp_study,
                                               "embeddings": embeddings_study, "curves": curves_study}
