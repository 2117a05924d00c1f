"""Intervals over items (analysis.items): hand-built studies whose bootstrap distributions are known exactly."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis.findings import side_items, values
from analysis.items import ItemInterval, item_interval, item_test
from analysis.study_runs import StudyRuns
from analysis.verdicts import Claim, combined_verdict
from common.migrations import SCHEMA_VERSION

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
    return item_interval([side_items(runs, side, seeds) for side in (a, b)], seeds, **settings)


def zeroshot_runs(reports: dict[tuple[str, int], dict]) -> StudyRuns:
    return StudyRuns(pd.DataFrame(), pd.DataFrame(), {}, reports)


SIDE_A = {"arm": "a", "zeroshot": {"method": "m", "level": "overall", "name": "overall"}}
SIDE_B = {**SIDE_A, "arm": "b"}


def shares(interval: ItemInterval) -> dict[float, float]:
    found, counts = np.unique(interval.differences.round(9), return_counts=True)
    return {float(v): c / len(interval.differences) for v, c in zip(found, counts)}


def test_resampling_paradigms_gives_the_exact_distribution_of_a_two_paradigm_study():
    # per paradigm A - B is 0 and 0.2 in both seeds: a draw of two paradigms averages to 0, 0.1 or 0.2 with
    # probabilities 1/4, 1/2, 1/4, so the 95 % interval is [0, 0.2]
    reports = {(arm, seed): blimp_report({"p1": 0.6, "p2": 0.8 if arm == "a" else 0.6}) for arm in "ab" for seed in (1, 2)}
    interval = interval_of(zeroshot_runs(reports), SIDE_A, SIDE_B, [1, 2], draws=DRAWS)
    assert interval.items == "paradigms" and (interval.low, interval.high) == pytest.approx((0.0, 0.2))
    assert shares(interval) == pytest.approx({0.0: 0.25, 0.1: 0.5, 0.2: 0.25}, abs=0.015)


def test_pairs_are_resampled_with_both_sides_paired():
    # one paradigm of four pairs; A wins pairs 1-2, B pair 1 only: the per-pair difference is (0, 1, 0, 0), so
    # A - B is (times pair 2 is drawn) / 4: zero with probability (3/4)^4. Unpaired draws would give another law.
    reports = {("a", 1): blimp_report({"p": 0.5}, {"p": "1100"}), ("b", 1): blimp_report({"p": 0.25}, {"p": "1000"})}
    interval = interval_of(zeroshot_runs(reports), SIDE_A, SIDE_B, [1], draws=DRAWS)
    assert interval.items == "paradigms and pairs"
    binomial = {k / 4: float(math.comb(4, k) * 0.25 ** k * 0.75 ** (4 - k)) for k in range(5)}
    assert shares(interval) == pytest.approx(binomial, abs=0.015)


def write_items(folder: Path, counts: list[list[list[int]]]) -> None:
    folder.mkdir(parents=True)
    (folder / "items.json").write_text(json.dumps({
        "schema_version": SCHEMA_VERSION, "metrics": {"entities": {"statistics": ["tp", "fp", "fn"], "score": "f1"}},
        "splits": {"validation": {"entities": counts}}}))


def test_resampling_dev_sentences_recomputes_micro_f1_from_their_counts(tmp_path):
    # A finds every entity of both sentences (F1 1 on any draw); B finds sentence 1's and misses sentence 2's:
    # its F1 is 1, 2/3 or 0 as a draw holds sentence 1 twice, once or never, so A - B is 0, 1/3 or 1
    write_items(tmp_path / "a" / "seed1" / "finetune" / "conll2003-full", [[[0, 0, 1], [0, 0, 1]], [[1, 0, 0], [1, 0, 0]]])
    write_items(tmp_path / "b" / "seed1" / "finetune" / "conll2003-full", [[[1, 0, 0], [0, 0, 1]]] * 2)
    runs = StudyRuns(pd.DataFrame(), pd.DataFrame(), {}, {}, root=tmp_path)
    a = {"arm": "a", "finetune": "conll2003-full", "metric": "f1"}
    interval = interval_of(runs, a, {**a, "arm": "b"}, [1], draws=DRAWS)
    assert interval.items == "sentences"
    assert shares(interval) == pytest.approx({0.0: 0.25, round(1 / 3, 9): 0.5, 1.0: 0.25}, abs=0.015)
    after_first = interval_of(runs, {**a, "epoch": 1}, {**a, "arm": "b", "epoch": 1}, [1], draws=DRAWS)
    assert shares(after_first) == pytest.approx({-1.0: 0.25, round(-2 / 3, 9): 0.5, 0.0: 0.25}, abs=0.015)


def test_a_side_without_items_has_no_item_interval(tmp_path):
    runs = StudyRuns(pd.DataFrame(), pd.DataFrame(), {}, {}, root=tmp_path)
    a = {"arm": "a", "finetune": "conll2003-full", "metric": "f1"}
    assert interval_of(runs, a, {**a, "arm": "b"}, [1]) is None


def test_the_item_test_is_calibrated_as_the_interval():
    claim_side = ItemInterval("paradigms", np.r_[np.full(9_990, 0.1), np.full(10, -0.1)], 0.1, 0.1)
    test = item_test(claim_side, SUPERIORITY)
    assert test.claim_p == pytest.approx(2 * 11 / 10_001) and test.side == "reproduced"
    straddling = ItemInterval("paradigms", np.r_[np.full(500, 0.1), np.full(500, -0.1)], -0.1, 0.1)
    assert item_test(straddling, SUPERIORITY).p == 1.0


@pytest.mark.parametrize(("seeds", "items", "decides", "verdict"), [
    ("reproduced", "reproduced", "both", "reproduced"),
    ("reproduced", "unresolved", "both", "unresolved"),
    ("unresolved", "reproduced", "both", "unresolved"),
    ("contradicted", "reproduced", "both", "unresolved"),
    ("reproduced", "unresolved", "seeds", "reproduced"),
    ("unresolved", "reproduced", "items", "reproduced"),
    ("not evidence", "reproduced", "both", "not evidence"),
    ("reproduced", None, "both", "reproduced"),
])
def test_the_registered_rule_decides_between_the_seed_test_and_the_item_test(seeds, items, decides, verdict):
    assert combined_verdict(seeds, items, decides)[0] == verdict


def test_the_epoch_reading_of_the_kept_excerpt_study_gives_issue_72s_table():
    """MLM - AR, both bidirectional, after each epoch of records/findings-v2-cpu (10 seeds)."""
    runs = StudyRuns.read(REPO / "records" / "findings-v2-cpu")
    mlm = {"arm": "mlm", "finetune": "conll2003-full", "metric": "f1"}
    ar = {"arm": "ar", "finetune": "conll2003-bidirectional", "metric": "f1"}
    for epoch, mean, above in ((1, 0.013, 9), (2, -0.004, 4), (3, -0.007, 1)):
        a, b = values(runs, {**mlm, "epoch": epoch}), values(runs, {**ar, "epoch": epoch})
        d = np.array([a[s] - b[s] for s in sorted(a)])
        assert len(d) == 10 and round(d.mean(), 3) == mean and (d > 0).sum() == above
    last = values(runs, mlm)  # the end-of-run score is the third epoch's
    assert last == pytest.approx(values(runs, {**mlm, "epoch": 3}))
