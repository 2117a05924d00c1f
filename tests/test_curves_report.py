"""The curves report reads points of unequal budgets and seeds: each arm is one point of its objective's line, placed
at its words seen, averaged over the seeds it has; paired differences use the seeds both points share. The runs are
the findings study's kept units (records/findings-cpu), with words_seen written in as a curve's runs carry it."""

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from armlm.analysis.reports.blimp_report import labelled_reports, one_release
from armlm.analysis.reports.curves_report import (
    BLIMP,
    GATE,
    PER_WORD,
    curve_points,
    curve_runs,
    point_costs,
    run_budgets,
    seed_costs,
    write_curves,
)
from armlm.analysis.tables import study_tables as S
from armlm.analysis.tables.curves_reading import crossings, direction, extrapolations, lead_changes, leads
from armlm.common.migrations import versioned
from tests.helpers.configs import REPO

KEPT = REPO / "records" / "findings-cpu"
SEEDS = {"ar_half": [1, 2], "ar": [1, 2, 3], "mlm_half": [1], "mlm": [1, 2]}
WORDS_PER_TOKEN = 0.4
F1 = "conll2003-full validation f1"


def curve_root(root: Path, seeds: dict[str, list[int]] = SEEDS) -> Path:
    for arm, arm_seeds in seeds.items():
        for seed in arm_seeds:
            shutil.copytree(KEPT / arm / f"seed{seed}", root / arm / f"seed{seed}")
            path = root / arm / f"seed{seed}" / "pretrain" / "summary.json"
            summary = json.loads(path.read_text())
            summary["words_seen"] = summary["tokens_seen"] * WORDS_PER_TOKEN
            path.write_text(json.dumps(versioned(summary)))
    return root


def runs_of(root: Path) -> pd.DataFrame:
    return curve_runs(root, run_budgets(root), labelled_reports([root]), S.stage_seconds(root))


def read(root: Path, arm: str, seed: int, *parts: str) -> dict:
    return json.loads((root / arm / f"seed{seed}").joinpath(*parts).read_text())


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return curve_root(tmp_path_factory.mktemp("curves"))


def test_each_arm_is_a_point_averaged_over_the_seeds_it_has(root):
    budgets = run_budgets(root)
    points = curve_points(runs_of(root), budgets).set_index(["measure", "arm"])
    for arm, seeds in SEEDS.items():
        nll = [read(root, arm, s, "diagnostics", "diagnostics.json")["likelihood"]["nll_per_token_without_eod"]
               for s in seeds]
        f1 = [read(root, arm, s, "finetune", "conll2003-full", "results.json")["metrics"]["validation"]["f1"]
              for s in seeds]
        tokens = read(root, arm, seeds[0], "pretrain", "summary.json")["tokens_seen"]
        for measure, values in (("heldout_nll", nll), (F1, f1)):
            point = points.loc[(measure, arm)]
            assert point["n"] == len(seeds) and point["mean"] == pytest.approx(sum(values) / len(values))
            assert point["words"] == pytest.approx(tokens * WORDS_PER_TOKEN) and point["tokens"] == tokens
    lines = points.loc[BLIMP]["line"]
    assert set(lines) == {"AutoregressiveLM · exact", "MaskedLM · pll", "MaskedLM · pll_word_l2r"}
    several = points.loc[("heldout_nll", "ar")]  # an interval over seeds: mean ± ci95
    assert several["low"] == pytest.approx(several["mean"] - several["ci95"])
    gate = [read(root, "ar", s, "pretrain", "summary.json")["own_below_unigram"]["all"]
            for s in SEEDS["ar"]]
    assert points.loc[(GATE, "ar")]["mean"] == pytest.approx(sum(gate) / len(gate))
    # the two budgets of one objective are two points of one line, in budget order
    ar_line = points.loc["heldout_nll"].reset_index().query("line == 'AutoregressiveLM'")
    assert list(ar_line["arm"]) == ["ar_half", "ar"]


def test_a_one_seed_blimp_point_carries_the_interval_over_its_pairs(tmp_path):
    root = curve_root(tmp_path, {"ar_half": [1]})
    overall = next(r for r in read(root, "ar_half", 1, "zeroshot", "zeroshot.json")["blimp"]["results"]["exact"]
                   if r["level"] == "overall")
    point = curve_points(runs_of(root), run_budgets(root)).query("measure == @BLIMP").iloc[0]
    assert (point["n"], point["low"], point["high"]) == (1, overall["ci_low"], overall["ci_high"])
    assert point["low"] < point["mean"] < point["high"]


def test_differences_pair_the_seeds_both_points_have(root):
    lead = leads(runs_of(root), run_budgets(root), F1).set_index("words")
    full, half = (round(2_201_600 * WORDS_PER_TOKEN, -3), round(1_101_824 * WORDS_PER_TOKEN, -3))
    f1 = {(arm, s): read(root, arm, s, "finetune", "conll2003-full", "results.json")["metrics"]["validation"]["f1"]
          for arm, seeds in SEEDS.items() for s in seeds}
    assert lead.loc[full, "n"] == 2  # ar has seeds 1-3, mlm 1-2
    assert lead.loc[full, "mean"] == pytest.approx(sum(f1["ar", s] - f1["mlm", s] for s in (1, 2)) / 2)
    assert lead.loc[half, "n"] == 1 and lead.loc[half, "mean"] == pytest.approx(f1["ar_half", 1] - f1["mlm_half", 1])
    assert set(lead["a"]) == {"AutoregressiveLM"} and set(lead["b"]) == {"MaskedLM"}


@pytest.mark.slow  # the study's standard report and its figures come with it (about 20 s)
def test_the_report_writes_a_figure_per_measure_and_says_where_blimp_passes_the_release(root):
    stage = root / "mlm" / "seed2" / "pretrain" / "stage.json"  # a launch that has not come back
    record = json.loads(stage.read_text())
    stage.write_text(json.dumps(versioned({**record, "started_at": 1.0})))
    running = S.stage_seconds(root).set_index("stage")["running"]
    assert running["mlm/seed2/pretrain"] and not running.drop("mlm/seed2/pretrain").any()
    try:
        written = write_curves(root)
    finally:
        stage.write_text(json.dumps(versioned(record)))
    names = {p.name for p in written}
    assert {"curves.md", "curves.csv", "leads.csv", "curve_blimp.png", "curve_heldout_nll.png",
            "report.md"} <= names
    text = (root / "report" / "curves.md").read_text()
    assert "| AutoregressiveLM · exact | 5-gram (0.5" in text and "first budget above it" in text
    assert "How a − b moves along the curve" in text and "## Wall minutes per seed" in text
    assert "## What one pass over 100M words (BabyLM's strict track) would cost" in text
    assert f"Not counted above (a launch has not come back: running, or stopped and not yet resumed): " \
           f"mlm/seed2/pretrain, {record['seconds'] / 60:.0f} minutes so far" in text
    assert "one seed: direction unresolved" in text and "Descriptive: no finding is registered" in text
    assert "zero-shot findings' budget" not in text  # a one-time rule, retired: its outcome is in its frozen record
    table = pd.read_csv(root / "report" / "curves.csv")
    assert set(table.query("measure == 'heldout_nll'")["n"]) == {1, 2, 3}


def test_two_arms_at_one_budget_of_one_line_and_runs_without_words_are_refused(tmp_path):
    root = curve_root(tmp_path / "clash", {"ar": [1], "ar_half": [1]})
    shutil.copytree(root / "ar", root / "ar_again")
    with pytest.raises(ValueError, match=r"arms \['ar', 'ar_again'\] both put AutoregressiveLM"):
        curve_points(runs_of(root), run_budgets(root))
    summary = root / "ar" / "seed1" / "pretrain" / "summary.json"
    summary.write_text(json.dumps({k: v for k, v in json.loads(summary.read_text()).items() if k != "words_seen"}))
    with pytest.raises(ValueError, match="has no words_seen"):
        run_budgets(root)


def test_a_branch_point_costs_its_own_run_plus_its_share_of_the_trunk():
    budgets = pd.DataFrame([
        {"arm": "ar_w20m", "seed": 1, "tokens": 1000, "trunk": None, "trunk_tokens": None},
        {"arm": "ar_w5m", "seed": 1, "tokens": 250, "trunk": "ar_w20m", "trunk_tokens": 200}])
    seconds = pd.DataFrame([
        {"arm": "ar_w20m", "seed": 1, "kind": "pretrain", "stage": "a", "seconds": 600.0},
        {"arm": "ar_w20m", "seed": 1, "kind": "finetune", "stage": "b", "seconds": 60.0},
        {"arm": "ar_w5m", "seed": 1, "kind": "pretrain", "stage": "c", "seconds": 30.0}])
    costs = {(r["arm"], r["measure"]): r["value"] for r in point_costs(budgets.assign(words=[400, 100]), seconds)}
    minutes = {arm: costs[arm, "minutes pretrain, trunk share included"] for arm in ("ar_w20m", "ar_w5m")}
    assert minutes == {"ar_w20m": pytest.approx(10.0), "ar_w5m": pytest.approx((30 + 600 * 200 / 1000) / 60)}
    assert costs["ar_w5m", PER_WORD] == pytest.approx((30 + 120) / 100 * 1000)
    per_seed = seed_costs(seconds.assign(seed=[1, 1, 2])).set_index("seed")
    assert per_seed.loc[1, "pretrain"] == 10 and per_seed.loc[1, "finetune"] == 1 and per_seed.loc[1, "total"] == 11
    assert per_seed.loc[2, "total"] == 0.5
    # a stage that kept no time leaves its kind and its seed's total unknown, never a smaller sum
    untimed = seed_costs(seconds.assign(seed=[1, 1, 1], seconds=[600.0, float("nan"), 30.0])).set_index("seed")
    assert untimed.loc[1, "pretrain"] == pytest.approx(10.5) and untimed.loc[1, ["finetune", "total"]].isna().all()


def test_a_crossing_is_read_at_the_mean_where_it_stays_and_where_its_interval_clears():
    means, lows = [0.55, 0.60, 0.57, 0.62, 0.64], [0.53, 0.57, 0.55, 0.59, 0.60]
    points = pd.DataFrame({"measure": BLIMP, "line": "ar · exact", "words": [1e6, 2e6, 4e6, 8e6, 16e6],
                           "mean": means, "low": lows})
    published = pd.DataFrame([{"arm": "5-gram", "level": "overall", "mean": 0.584},
                              {"arm": "GPT-2", "level": "overall", "mean": 0.8}])
    table = crossings(points, published).set_index("model")
    assert table.loc["5-gram", ["first_above", "stays_above", "clear_above"]].tolist() == [2e6, 8e6, 8e6]
    assert table.loc["GPT-2", ["first_above", "stays_above", "clear_above"]].isna().all()


def test_a_lead_change_pairs_each_seeds_difference_at_the_smallest_and_largest_shared_budgets():
    value = {("a", 1, 1): 5.0, ("b", 1, 1): 4.0, ("a", 1, 3): 9.0, ("b", 1, 3): 5.0,  # seed 1: lead 1 -> 4
             ("a", 2, 1): 3.0, ("b", 2, 1): 3.0, ("a", 2, 3): 6.0, ("b", 2, 3): 4.0,  # seed 2: lead 0 -> 2
             ("a", 3, 1): 1.0, ("b", 3, 1): 0.0, ("a", 2, 2): 7.0, ("b", 2, 2): 1.0}  # seed 3 has no end; 2k words
    runs = pd.DataFrame([{"arm": f"{line}{k}", "seed": seed, "measure": "m", "line": line, "value": v}
                         for (line, seed, k), v in value.items()])
    budgets = pd.DataFrame([{"arm": f"{line}{k}", "words": k * 1000} for line in "ab" for k in (1, 2, 3)])
    change = lead_changes(runs, budgets, "m").iloc[0]
    assert (change["a"], change["b"], change["from_words"], change["to_words"]) == ("a", "b", 1000, 3000)
    assert change["n"] == 2 and change["mean"] == pytest.approx(((4 - 1) + (2 - 0)) / 2)


def test_a_line_is_extrapolated_at_its_largest_budget_from_its_rate_and_flops_per_word():
    points = pd.DataFrame({"measure": PER_WORD, "line": ["ar", "ar", "mlm"], "arm": ["ar_s", "ar_l", "mlm_l"],
                           "words": [1e6, 4e6, 4e6], "mean": [9.0, 0.5, 0.8], "n": [1, 2, 1]})
    budgets = pd.DataFrame({"arm": ["ar_s", "ar_l", "ar_l", "mlm_l"], "words": [1e6, 4e6, 4e6, 4e6],
                            "flops": [1e12, 2e13, 2.4e13, 3e13]})
    table = extrapolations(points, budgets, PER_WORD, words=1e8, peak_flops=1e15).set_index("line")
    ar = table.loc["ar"]
    assert ar["at_words"] == 4e6 and ar["seconds_per_kword"] == 0.5  # the smaller point's rate is not read
    assert ar["hours_here"] == pytest.approx(0.5 * 1e5 / 3600)
    assert ar["flops_per_word"] == pytest.approx((5e6 + 6e6) / 2)
    assert ar["hours_at_peak"] == pytest.approx(5.5e6 * 1e8 / 1e15 / 3600)
    assert table.loc["mlm", "hours_here"] == pytest.approx(0.8 * 1e5 / 3600)


def test_a_difference_s_reading_needs_seeds_and_an_interval_clear_of_zero():
    assert direction(0.8, float("nan"), 1, "rose", "fell") == "one seed: direction unresolved"
    assert direction(0.8, 1.0, 3, "rose", "fell") == "unresolved (the interval spans 0)"
    assert (direction(0.8, 0.5, 3, "rose", "fell"), direction(-0.8, 0.5, 3, "rose", "fell")) == ("rose", "fell")


def test_the_gate_reads_the_smallest_part_of_the_own_margin():
    assert S.lowest_own_margin({"all": 1.0, "masked": 1.2, "causal": 0.4}) == 0.4  # a hybrid: its weaker reading
    assert S.lowest_own_margin({"all": 1.5}) == 1.5
    assert S.lowest_own_margin(None) is None and S.lowest_own_margin({"all": None}) is None


def test_reports_that_score_the_release_over_different_paradigms_are_refused(root):
    reports = labelled_reports([root])
    assert not one_release(reports).empty
    arm, seed, report = reports[0]
    changed = json.loads(json.dumps(report))
    for row in changed["blimp"]["published"]:
        if row["level"] == "overall":
            row["5-gram"] += 0.01
    with pytest.raises(ValueError, match="score the release's models over different paradigms"):
        one_release([*reports, ("other", 1, changed)])
