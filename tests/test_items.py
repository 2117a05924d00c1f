"""Intervals over items and over seeds and items together (analysis.findings.items): hand-built studies whose bootstrap
distributions are known exactly, and simulated studies with known variance components for the crossed interval's
coverage."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats

from armlm.analysis.findings.items import (
    BlimpItems,
    ItemInterval,
    SentenceItems,
    crossed_test,
    item_interval,
    item_test,
    read_items,
)
from armlm.analysis.findings.measures import parse_side, side_items
from armlm.analysis.findings.verdicts import Claim
from armlm.analysis.tables.study_runs import StudyRuns
from armlm.common.errors import ArmlmError
from armlm.common.migrations import SCHEMA_VERSION
from tests.helpers.findings import side_values
from tests.helpers.lanes import fast_lane_keeps

REPO = Path(__file__).resolve().parents[1]
SUPERIORITY = Claim("superiority", "greater", 0.01)
DRAWS = 20_000


def blimp_report(accuracy: dict[str, float], outcomes: dict[str, str] | None = None) -> dict:
    rows = [{"level": "paradigm", "name": uid, "accuracy": acc} for uid, acc in accuracy.items()]
    rows.append({"level": "overall", "name": "overall", "accuracy": float(np.mean(list(accuracy.values())))})
    blimp = {"results": {"m": rows}}
    if outcomes is not None:
        blimp["pair_outcomes"] = {"m": outcomes}
    return {"blimp": blimp}


def interval_of(runs: StudyRuns, a: dict, b: dict, seeds: list[int], **settings) -> ItemInterval | None:
    return item_interval([side_items(runs, parse_side(side, "side"), seeds) for side in (a, b)], seeds, **settings)


def zeroshot_runs(reports: dict[tuple[str, int], dict]) -> StudyRuns:
    return StudyRuns(pd.DataFrame(), pd.DataFrame(), {}, reports)


SIDE_A = {"arm": "a", "zeroshot": {"method": "m", "level": "overall", "name": "overall"}}
SIDE_B = {**SIDE_A, "arm": "b"}
NER = {"finetune": "conll2003-full", "metric": "f1"}


def shares(draws: np.ndarray) -> dict[float, float]:
    found, counts = np.unique(draws.round(9), return_counts=True)
    return {float(v): c / len(draws) for v, c in zip(found, counts)}


def test_resampling_paradigms_gives_the_exact_distribution_of_a_two_paradigm_study():
    # per paradigm A - B is 0 and 0.2 in both seeds: a draw of two paradigms averages to 0, 0.1 or 0.2 with
    # probabilities 1/4, 1/2, 1/4, so the 95 % interval is [0, 0.2]
    reports = {(arm, seed): blimp_report({"p1": 0.6, "p2": 0.8 if arm == "a" else 0.6}) for arm in "ab" for seed in (1, 2)}
    interval = interval_of(zeroshot_runs(reports), SIDE_A, SIDE_B, [1, 2], draws=DRAWS)
    assert interval.items == "paradigms" and (interval.item_low, interval.item_high) == pytest.approx((0.0, 0.2))
    assert shares(interval.item_draws) == pytest.approx({0.0: 0.25, 0.1: 0.5, 0.2: 0.25}, abs=0.015)


def test_pairs_are_resampled_within_their_paradigm_with_both_sides_paired():
    # paradigm p: four pairs, A wins pairs 1-2, B pair 1 only, so the per-pair difference is (0, 1, 0, 0); paradigm q:
    # both sides win both pairs. The macro average's A - B is (times pair 2 is drawn) / 4 / 2: q is a stratum, never
    # dropped or doubled, so it always halves p's difference. Unpaired or paradigm draws would give other laws.
    reports = {("a", 1): blimp_report({"p": 0.5, "q": 1.0}, {"p": "1100", "q": "11"}),
               ("b", 1): blimp_report({"p": 0.25, "q": 1.0}, {"p": "1000", "q": "11"})}
    interval = interval_of(zeroshot_runs(reports), SIDE_A, SIDE_B, [1], draws=DRAWS)
    assert interval.items == "pairs within paradigms" and interval.mean == pytest.approx(0.125)
    binomial = {k / 8: float(math.comb(4, k) * 0.25 ** k * 0.75 ** (4 - k)) for k in range(5)}
    assert shares(interval.item_draws) == pytest.approx(binomial, abs=0.015)
    by_paradigm = interval_of(zeroshot_runs(reports), SIDE_A, SIDE_B, [1], draws=DRAWS, unit="paradigms")
    assert shares(by_paradigm.item_draws) == pytest.approx({0.0: 0.25, 0.125: 0.5, 0.25: 0.25}, abs=0.015)


def write_items(folder: Path, counts: list[list[list[int]]], documents: list[int] | None = None) -> None:
    folder.mkdir(parents=True)
    clusters = {} if documents is None else {"clusters": {"validation": documents}}
    (folder / "items.json").write_text(json.dumps({
        "schema_version": SCHEMA_VERSION, "metrics": {"entities": {"statistics": ["tp", "fp", "fn"], "score": "f1"}},
        "splits": {"validation": {"entities": counts}}, **clusters}))


def test_resampling_dev_sentences_recomputes_micro_f1_from_their_counts(tmp_path):
    # A finds every entity of both sentences (F1 1 on any draw); B finds sentence 1's and misses sentence 2's:
    # its F1 is 1, 2/3 or 0 as a draw holds sentence 1 twice, once or never, so A - B is 0, 1/3 or 1
    write_items(tmp_path / "a" / "seed1" / "finetune" / "conll2003-full", [[[0, 0, 1], [0, 0, 1]], [[1, 0, 0], [1, 0, 0]]])
    write_items(tmp_path / "b" / "seed1" / "finetune" / "conll2003-full", [[[1, 0, 0], [0, 0, 1]]] * 2)
    runs = StudyRuns(pd.DataFrame(), pd.DataFrame(), {}, {}, root=tmp_path)
    a = {"arm": "a", **NER}
    interval = interval_of(runs, a, {**a, "arm": "b"}, [1], draws=DRAWS)
    assert interval.items == "sentences"
    assert shares(interval.item_draws) == pytest.approx({0.0: 0.25, round(1 / 3, 9): 0.5, 1.0: 0.25}, abs=0.015)
    after_first = interval_of(runs, {**a, "epoch": 1}, {**a, "arm": "b", "epoch": 1}, [1], draws=DRAWS)
    assert shares(after_first.item_draws) == pytest.approx({-1.0: 0.25, round(-2 / 3, 9): 0.5, 0.0: 0.25}, abs=0.015)


def test_a_document_is_drawn_with_all_its_sentences(tmp_path):
    # four sentences in two documents; B misses both of document 1's entities. Drawn by document, B's F1 is 1, 2/3
    # or 0 (A - B 0, 1/3, 1) as document 0 is drawn twice, once or never; drawn by sentence, five values occur
    for arm, counts in (("a", [[1, 0, 0]] * 4), ("b", [[1, 0, 0], [1, 0, 0], [0, 0, 1], [0, 0, 1]])):
        write_items(tmp_path / arm / "seed1" / "finetune" / "conll2003-full", [counts], documents=[0, 0, 1, 1])
    runs = StudyRuns(pd.DataFrame(), pd.DataFrame(), {}, {}, root=tmp_path)
    a = {"arm": "a", **NER}
    by_document = interval_of(runs, a, {**a, "arm": "b"}, [1], draws=DRAWS)
    assert by_document.items == "documents" and by_document.resampled == 2
    assert shares(by_document.item_draws) == pytest.approx({0.0: 0.25, round(1 / 3, 9): 0.5, 1.0: 0.25}, abs=0.015)
    by_sentence = interval_of(runs, a, {**a, "arm": "b"}, [1], draws=DRAWS, unit="sentences")
    assert by_sentence.items == "sentences" and len(shares(by_sentence.item_draws)) == 5


def clustered_study(rng: np.random.Generator, documents: int = 40, per_document: int = 10,
                    seeds: int = 5) -> list[dict[int, SentenceItems]]:
    """Two sides' per-sentence entity counts where whether B misses an entity depends on its document (some
    documents are hard for B: their sentences' misses come together)."""
    n = documents * per_document
    document_of = np.repeat(np.arange(documents), per_document)
    hard = rng.random(documents) < 0.3
    sides: list[dict[int, SentenceItems]] = [{}, {}]
    for seed in range(1, seeds + 1):
        entities = np.full(n, 4)
        for k, miss in enumerate((np.full(n, 0.2), np.where(hard[document_of], 0.6, 0.1))):
            found = rng.binomial(entities, 1 - miss)
            counts = np.stack([found, np.zeros(n, dtype=int), entities - found], axis=1)
            sides[k][seed] = SentenceItems(counts, document_of)
    return sides


def test_a_clustered_design_gives_a_wider_interval_than_an_unclustered_one():
    sides = clustered_study(np.random.default_rng(3))
    seeds = sorted(sides[0])
    width = {unit: (lambda i: i.item_high - i.item_low)(item_interval([[(1.0, s)] for s in sides], seeds, draws=4000,
                                                                      unit=unit))
             for unit in ("documents", "sentences")}
    assert width["documents"] > 1.5 * width["sentences"], width


def test_an_unknown_or_unkept_unit_is_refused():
    sides = clustered_study(np.random.default_rng(4), documents=4, per_document=2, seeds=2)
    with pytest.raises(ArmlmError, match="choose documents or sentences"):
        item_interval([[(1.0, s)] for s in sides], [1, 2], draws=1000, unit="pairs")
    unkept = [{seed: SentenceItems(items.counts) for seed, items in side.items()} for side in sides]
    with pytest.raises(ArmlmError, match="kept no documents"):
        item_interval([[(1.0, s)] for s in unkept], [1, 2], draws=1000, unit="documents")
    blimp = [{1: BlimpItems({"p": 0.5}, None)}, {1: BlimpItems({"p": 0.4}, None)}]
    with pytest.raises(ArmlmError, match="kept no pair outcomes"):
        item_interval([[(1.0, s)] for s in blimp], [1], draws=1000, unit="pairs")


def simulated_coverage(seed_sd: float, item_sd: float, studies: int, seeds: int = 8, items: int = 30,
                       level: float = 0.95, interaction_sd: float = 0.01) -> dict[str, float]:
    """Per-paradigm A - B = seed effect + paradigm effect + noise, true mean 0.1: the share of studies whose
    crossed, seed-only and item-only intervals cover it."""
    rng = np.random.default_rng(11)
    covered = {"crossed": 0, "seeds": 0, "items": 0}
    uids = [f"p{k}" for k in range(items)]
    for _ in range(studies):
        d = (0.1 + rng.normal(0, seed_sd, (seeds, 1)) + rng.normal(0, item_sd, (1, items))
             + rng.normal(0, interaction_sd, (seeds, items)))
        a = {s + 1: BlimpItems(dict(zip(uids, 0.5 + d[s])), None) for s in range(seeds)}
        b = {s + 1: BlimpItems(dict.fromkeys(uids, 0.5), None) for s in range(seeds)}
        interval = item_interval([[(1.0, a)], [(1.0, b)]], list(a), level, draws=1000, seed=int(rng.integers(1 << 30)))
        half = float(stats.sem(interval.observed) * stats.t.ppf(0.5 + level / 2, seeds - 1))
        covered["crossed"] += interval.crossed_low <= 0.1 <= interval.crossed_high
        covered["seeds"] += abs(interval.mean - 0.1) <= half
        covered["items"] += interval.item_low <= 0.1 <= interval.item_high
    return {k: v / studies for k, v in covered.items()}


@pytest.mark.parametrize(("seed_sd", "item_sd", "undercovering", "below", "seeds"), fast_lane_keeps([
    (0.03, 0.005, ["items"], 0.5, 8),  # the seeds dominate: the item interval misses most of the variance
    (0.005, 0.03, ["seeds"], 0.7, 8),
    (0.01, 0.02, ["seeds", "items"], 0.9, 8),  # comparable components: each alone misses about half
    (0.03, 0.01, ["items"], 0.5, 3),  # three seeds: a seed variance on 2 df must not narrow the interval
    (0.005, 0.05, ["seeds"], 0.8, 3),
], every=5))
def test_the_crossed_interval_has_its_nominal_coverage_where_either_source_alone_falls_short(seed_sd, item_sd,
                                                                                            undercovering, below,
                                                                                            seeds):
    coverage = simulated_coverage(seed_sd, item_sd, studies=300, seeds=seeds)
    assert 0.92 <= coverage["crossed"] <= 0.985, coverage  # 300 studies: 0.95 +- 2.4 standard errors
    assert all(coverage[k] < below for k in undercovering), coverage


def test_the_seed_by_item_interaction_is_counted_once():
    """Pure interaction (no seed or item main effect): the crossed draws' own sd counts it about three times; the
    corrected standard error is near the true sd of the mean over 300 studies, and the interval still covers."""
    coverage = simulated_coverage(0.0, 0.0, studies=300, interaction_sd=0.05)
    assert 0.92 <= coverage["crossed"] <= 0.985, coverage
    rng = np.random.default_rng(12)
    uids = [f"p{k}" for k in range(30)]
    means, ses, raw = [], [], []
    for _ in range(300):
        d = 0.1 + rng.normal(0, 0.05, (8, 30))
        a = {s + 1: BlimpItems(dict(zip(uids, 0.5 + d[s])), None) for s in range(8)}
        b = {s + 1: BlimpItems(dict.fromkeys(uids, 0.5), None) for s in range(8)}
        interval = item_interval([[(1.0, a)], [(1.0, b)]], list(a), draws=1000, seed=int(rng.integers(1 << 30)))
        means.append(interval.mean)
        ses.append(interval.se)
        raw.append(float(interval.crossed_draws.std(ddof=1)))
    truth = float(np.std(means))  # 0.05 / sqrt(240)
    assert np.mean(ses) == pytest.approx(truth, rel=0.15) and np.mean(raw) > 1.4 * truth


def test_the_tests_are_calibrated_as_their_intervals():
    claim_side = ItemInterval("paradigms", np.zeros(2), np.r_[np.full(9_990, 0.1), np.full(10, -0.1)], np.empty(0),
                              10, 0.95)
    test = item_test(claim_side, SUPERIORITY)
    assert test.claim_p == pytest.approx(2 * 11 / 10_001) and test.side == "reproduced"
    rng = np.random.default_rng(5)
    claims = {"superiority": (SUPERIORITY, 0.0, None), "non_inferiority": (Claim("non_inferiority", "greater", 0.02,
                                                                                    margin=0.02), -0.02, None),
              "equivalence": (Claim("equivalence", "greater", 0.02, margin=0.02), -0.02, 0.02)}
    for shift in (0.0, 0.01, 0.02, 0.03, -0.03, -0.01):
        observed = shift + rng.normal(0, 0.02, 6)
        interval = ItemInterval("documents", observed, observed.mean() + rng.normal(0, 0.005, 4000),
                                observed.mean() + rng.normal(0, 0.01, 4000), 50, 0.95)
        for claim, low, high in claims.values():
            crossed = crossed_test(interval, claim)
            inside = interval.crossed_low > low and (high is None or interval.crossed_high < high)
            assert (crossed.claim_p < 0.05) == inside, (shift, claim)
        assert (crossed_test(interval, SUPERIORITY).refute_p < 0.05) == (interval.crossed_high < 0), shift


def test_an_interaction_side_resamples_both_of_its_readings_on_the_same_draw(tmp_path):
    # one entity per sentence: a's bidirectional run finds both, its causal run and both of b's runs sentence 1's
    # only. A = F1(a, bi) - F1(a, causal) = 1 - 2/3, B = 0: an interaction of 1/3
    for arm, variant, found in (("a", "bi", [1, 1]), ("a", "causal", [1, 0]), ("b", "bi", [1, 0]), ("b", "causal", [1, 0])):
        write_items(tmp_path / arm / "seed1" / "finetune" / f"conll2003-{variant}",
                    [[[f, 0, 1 - f] for f in found]], documents=[0, 1])
    runs = StudyRuns(pd.DataFrame(), pd.DataFrame(), {}, {}, root=tmp_path)
    side = {"arm": "a", "finetune": "conll2003-bi", "metric": "f1", "relative_to": {"finetune": "conll2003-causal"}}
    interval = interval_of(runs, side, {**side, "arm": "b"}, [1], draws=DRAWS)
    assert interval.mean == pytest.approx(1 / 3)
    # sentence 2 drawn never: every run's F1 is 1 (0); once: 1/3; twice: a's bidirectional 1, the others 0 (1)
    assert shares(interval.item_draws) == pytest.approx({0.0: 0.25, round(1 / 3, 9): 0.5, 1.0: 0.25}, abs=0.015)


def test_items_kept_before_their_documents_read_them_from_the_runs_source(tmp_path, data_dir):
    folder = tmp_path / "run"
    write_items(folder, [[[1, 0, 0]] * 5])
    (folder / ".hydra").mkdir()
    (folder / ".hydra" / "config.yaml").write_text(yaml.safe_dump({
        "data_dir": str(data_dir), "task": {"data": {"_target_": "armlm.datamodules.finetune.ConllDataModule",
                                                     "source": "${data_dir}/conll2003"}}}))
    items = read_items(folder, "f1", None)
    assert items.documents is not None and len(items.documents) == 5 and items.documents[0] == 0
    (folder / ".hydra" / "config.yaml").write_text(yaml.safe_dump({
        "task": {"data": {"_target_": "armlm.datamodules.finetune.GlueDataModule", "source": "x"}}}))
    assert read_items(folder, "f1", None).documents is None  # a task without clusters


def test_the_epoch_reading_of_the_kept_excerpt_study_gives_issue_72s_table():
    """MLM - AR, both bidirectional, after each epoch of records/findings-v2-cpu (10 seeds)."""
    runs = StudyRuns.read(REPO / "records" / "findings-v2-cpu")
    mlm = {"arm": "mlm", "finetune": "conll2003-full", "metric": "f1"}
    ar = {"arm": "ar", "finetune": "conll2003-bidirectional", "metric": "f1"}
    for epoch, mean, above in ((1, 0.013, 9), (2, -0.004, 4), (3, -0.007, 1)):
        a, b = side_values(runs, {**mlm, "epoch": epoch}), side_values(runs, {**ar, "epoch": epoch})
        d = np.array([a[s] - b[s] for s in sorted(a)])
        assert len(d) == 10 and round(d.mean(), 3) == mean and (d > 0).sum() == above
    last = side_values(runs, mlm)  # the end-of-run score is the third epoch's
    assert last == pytest.approx(side_values(runs, {**mlm, "epoch": 3}))
