"""Findings read from a study folder: per-seed values of each side, paired differences and verdicts."""

import math

import pandas as pd
import pytest

from armlm.analysis.findings.quantities import Representation
from armlm.analysis.findings.registrations import StudySpec
from armlm.analysis.reports.findings_report import findings_table, write_findings
from armlm.analysis.tables.study_runs import NotComparable, StudyRuns
from armlm.analysis.tables.study_tables import finetuning_runs, per_checkpoint, representation_runs
from tests.helpers.findings import (
    FINDINGS,
    finetune_result,
    judged,
    likelihood_report,
    pretraining_summary,
    registered,
    side_values,
    task_result,
    write,
)


def test_verdicts_from_a_study_folder(study):
    table = judged(study, FINDINGS).set_index("finding")
    assert table.loc["bidirectional", "verdict"] == "reproduced"
    assert table.loc["bidirectional", "difference"] == pytest.approx((0.10 + 0.13 + 0.11) / 3)
    assert table.loc["bidirectional", "n"] == 3 and table.loc["bidirectional", "seeds"] == [1, 2, 3]
    assert table.loc["backwards", "verdict"] == "contradicted"
    nsp = table.loc["nsp"]  # differences -0.02, +0.05, -0.02: straddles zero
    assert nsp["verdict"] == "unresolved" and nsp["ci_low"] < 0 < nsp["ci_high"] and nsp["seeds_needed"] > 3
    assert table.loc["mrf", "verdict"] == "reproduced" and table.loc["mrf", "difference"] == pytest.approx(7.0)
    # gap at distance 1 (0.6, 0.7, 0.8) against the mean over distances >= 3 (0.05)
    assert table.loc["local_mlm", "difference"] == pytest.approx(0.7 - 0.05)
    # the ar diagnostics were restricted to 20 candidates: refused, whatever the numbers say
    assert table.loc["local_ar", "verdict"] == "not evidence" and "not comparable" in table.loc["local_ar", "note"]
    # ar's last layer (0.71, 0.72, 0.73) against mlm's first (0.9): the other way
    assert table.loc["shift", "verdict"] == "contradicted"
    assert table.loc["shift", "a_mean"] == pytest.approx(0.72)


def left_shift_report(cosine: float, cka: float) -> dict:
    """A diagnostics report by hand: the shift and, with other figures, the left-mask shift."""
    return {"representations": {
        "shift": {"0.4": [{"layer": 1, "cosine": 0.5, "cka": 0.4}, {"layer": 2, "cosine": 0.3, "cka": 0.2}]},
        "shift_left": {"0.4": [{"layer": 1, "cosine": 0.99, "cka": 0.98}, {"layer": 2, "cosine": cosine, "cka": cka}]},
        "shift_left_masks_seen": {"0.4": 2.5}, "shift_left_read_tokens": {"0.4": 40}, "geometry": []}}


def test_the_left_mask_shift_is_read_from_its_own_section(tmp_path):
    report = left_shift_report(0.8, 0.7)
    assert Representation().read(report, {"measure": "shift_left_cosine@0.4", "layer": "last"}) == 0.8
    assert Representation().read(report, {"measure": "shift_left_cka@0.4", "layer": 1}) == 0.98
    assert Representation().read(report, {"measure": "shift_cosine@0.4", "layer": "last"}) == 0.3  # unchanged
    for seed in (1, 2):
        write(tmp_path / "mlm" / f"seed{seed}" / "diagnostics" / "diagnostics.json",
              left_shift_report(0.8 + 0.01 * seed, 0.7))
    side = {"arm": "mlm", "representation": {"measure": "shift_left_cosine@0.4", "layer": "last"}}
    assert side_values(StudyRuns.read(tmp_path), side) == pytest.approx({1: 0.81, 2: 0.82})
    measures = set(representation_runs({("ar", 1): report})["measure"])
    assert {"shift_left_cosine@0.4", "shift_left_cka@0.4", "shift_cosine@0.4", "shift_cka@0.4"} <= measures
    # A report written before the section existed: not comparable (its finding unresolved), not a KeyError.
    with pytest.raises(NotComparable, match="shift_left"):
        Representation().read({"representations": {"shift": report["representations"]["shift"], "geometry": []}},
                        side["representation"])


def test_finetuning_seeds_are_reduced_to_their_median_per_checkpoint(tmp_path):
    for j, f1 in enumerate([0.5, 0.9, 0.6], 1):
        finetune_result(tmp_path, "mlm", 1, f"conll2003-full-ft{j}", f1, finetune_seed=100 + j)
    for j, f1 in enumerate([0.4, 0.45, 0.1], 1):
        finetune_result(tmp_path, "ar", 1, f"conll2003-full-ft{j}", f1, finetune_seed=100 + j)
    runs = finetuning_runs(tmp_path)
    assert set(runs["variant"]) == {"full"} and sorted(runs["finetune_seed"].unique()) == [101, 102, 103]
    medians = per_checkpoint(runs).set_index("arm")
    assert medians.loc["mlm", "value"] == 0.6 and medians.loc["ar", "value"] == 0.4
    assert medians.loc["mlm", "finetune_runs"] == 3
    table = judged(tmp_path, {"one": FINDINGS["bidirectional"]})
    assert table.loc[0, "difference"] == pytest.approx(0.2) and table.loc[0, "verdict"] == "unresolved"  # one seed


F6 = {"direction": "greater", "a": {"arm": "masked_diffusion", "likelihood": "nll_per_token"},
      "b": {"arm": "ar", "likelihood": "nll_per_token"}}


def test_likelihoods_compare_only_on_the_same_held_out_blocks(tmp_path):
    for seed, (bound, exact) in enumerate([(5.9, 3.9), (5.8, 4.0), (6.0, 3.95)], 1):
        likelihood_report(tmp_path, "masked_diffusion", seed, bound)
        likelihood_report(tmp_path, "ar", seed, exact)
    row = judged(tmp_path, {"F6": F6}).iloc[0]
    assert row["verdict"] == "reproduced" and row["difference"] == pytest.approx((2.0 + 1.8 + 2.05) / 3)
    likelihood_report(tmp_path, "ar", 2, 4.0, fingerprint="other-blocks")
    row = judged(tmp_path, {"F6": F6}).iloc[0]
    assert row["verdict"] == "not evidence" and "different held-out blocks" in row["note"] and "[2]" in row["note"]


def test_a_mean_over_tasks_pairs_the_seeds_every_task_has(tmp_path):
    """A GLUE-style score: the mean of each task's named metric, per seed, over the seeds every task has."""
    scores = {"electra": {"cola": 0.30, "sst2": 0.80}, "mlm": {"cola": 0.20, "sst2": 0.78}}
    for arm, tasks in scores.items():
        for seed in (1, 2, 3):
            task_result(tmp_path, arm, seed, "cola", {"mcc": tasks["cola"] + 0.01 * seed})
            if not (arm == "mlm" and seed == 3):  # a task one seed lacks: that seed has no mean
                task_result(tmp_path, arm, seed, "sst2", {"accuracy": tasks["sst2"], "f1": 0.0})
    side = {"variant": "full", "metrics": {"cola": "mcc", "sst2": "accuracy"}}
    runs = StudyRuns.read(tmp_path)
    assert side_values(runs, {"arm": "mlm", "finetune_mean": side}) == pytest.approx({1: 0.495, 2: 0.5})
    row = judged(tmp_path, {"E1": {"a": {"arm": "electra", "finetune_mean": side},
                                   "b": {"arm": "mlm", "finetune_mean": side}}}).iloc[0]
    assert row["difference"] == pytest.approx(0.06) and row["n"] == 2  # (0.10 + 0.02) / 2 on seeds 1-2
    assert row["a"] == "electra: fine-tuned, mean of cola mcc, sst2 accuracy (full)"


def test_a_side_relative_to_another_arm_is_the_change_between_them(tmp_path):
    """F7's form: the NLL change from 4 to 16 epochs, masked diffusion's against AR's."""
    changes = {"ar": (3.0, 3.2), "mdlm": (5.5, 5.0)}  # (4 epochs, 16 epochs): AR worse, MDLM better
    for seed in (1, 2, 3):
        for objective, (at4, at16) in changes.items():
            pretraining_summary(tmp_path, f"{objective}_e4", seed, at4 + 0.01 * seed, objective)
            pretraining_summary(tmp_path, f"{objective}_e16", seed, at16 + 0.02 * seed, objective)
    gain = {"direction": "less",
            "a": {"arm": "mdlm_e16", "pretraining": "val_likelihood", "relative_to": "mdlm_e4"},
            "b": {"arm": "ar_e16", "pretraining": "val_likelihood", "relative_to": "ar_e4"}}
    row = judged(tmp_path, {"F7": gain}).iloc[0]
    # per seed: (-0.5 + 0.01 s) - (0.2 + 0.01 s) = -0.7
    assert row["difference"] == pytest.approx(-0.7) and row["verdict"] == "reproduced"
    assert row["a"] == "mdlm_e16: pretraining val_likelihood minus mdlm_e4's"


def test_a_side_relative_to_another_reading_of_its_arm_gives_an_interaction(tmp_path):
    """decomposition_2x2's F1_interaction: each arm's bidirectional minus causal F1, MLM's against AR's."""
    f1 = {("mlm", "bi"): 0.78, ("mlm", "causal"): 0.62, ("ar", "bi"): 0.77, ("ar", "causal"): 0.71}
    for seed in (1, 2, 3):
        for (arm, variant), score in f1.items():
            pretraining_summary(tmp_path, arm, seed, 3.0, arm)
            finetune_result(tmp_path, arm, seed, f"conll2003-{variant}", score + 0.01 * seed * (arm == "mlm"))
    side = {"arm": "mlm", "finetune": "conll2003-bi", "metric": "f1", "relative_to": {"finetune": "conll2003-causal"}}
    assert side_values(StudyRuns.read(tmp_path), side) == pytest.approx({1: 0.16, 2: 0.16, 3: 0.16})
    row = judged(tmp_path, {"interaction": {"a": side, "b": {**side, "arm": "ar"}}}).iloc[0]
    assert row["difference"] == pytest.approx(0.16 - 0.06) and row["verdict"] == "reproduced"
    assert row["a"] == "mlm: finetune conll2003-bi f1 minus mlm: finetune conll2003-causal f1"
    with pytest.raises(ValueError, match="changes keys the side does not have"):
        side_values(StudyRuns.read(tmp_path), {**side, "relative_to": {"epoch": 2}})


def test_holm_runs_over_the_whole_family(study):
    one = judged(study, {"bidirectional": FINDINGS["bidirectional"]}, adjust=True).iloc[0]
    family = judged(study, FINDINGS, adjust=True).set_index("finding")
    assert one["p_holm"] == pytest.approx(one["p"])  # a family of one needs no adjustment
    ranks = family["p"].rank(method="first").astype(int)
    smallest = family["p"].idxmin()
    assert family.loc[smallest, "p_holm"] == pytest.approx(min(1.0, len(family) * family.loc[smallest, "p"]))
    assert (family["p_holm"] >= family["p"] - 1e-12).all() and ranks.is_unique


def test_a_finding_without_a_registered_test_is_refused(study):
    with pytest.raises(ValueError, match="registered"):
        findings_table(study, {"findings": {"F": FINDINGS["bidirectional"]}})
    bad = registered(FINDINGS["nsp"], kind="equivalence")  # equivalence without a margin
    with pytest.raises(ValueError, match="margin"):
        findings_table(study, {"findings": {"F2": bad}})


def test_past_exit_reads_each_curve_the_same_steps_after_its_own_plateau_exit():
    from armlm.analysis.findings.quantities import likelihood_tag, past_exit

    spec = {"steps": 100, "exit_at": 5.3}
    early = pd.Series([5.9, 5.2, 4.8, 4.6, 4.5, 4.4], index=[0, 50, 100, 150, 200, 250])  # exits at 50
    late = pd.Series([5.9, 5.85, 5.8, 5.3, 5.0, 4.9], index=[0, 50, 100, 150, 200, 250])  # exits at 150
    assert past_exit(early, spec) == 4.6  # step 150
    assert past_exit(late, spec) == 4.9  # step 250
    assert math.isnan(past_exit(late, {**spec, "steps": 101}))  # ends before 150 + 101
    assert math.isnan(past_exit(pd.Series([5.9, 5.7]), spec))  # never left its plateau
    assert likelihood_tag("val/nelbo", "run") == "val/nelbo"
    with pytest.raises(NotComparable, match="names no val_likelihood_tag"):
        likelihood_tag(None, "run")  # an MLM logs no likelihood; old summaries lack the key


def test_a_row_without_paired_seeds_is_unresolved_and_says_why(tmp_path):
    finetune_result(tmp_path, "mlm", 1, "conll2003-full", 0.7)
    finetune_result(tmp_path, "ar", 2, "conll2003-full", 0.6)
    row = judged(tmp_path, {"one": FINDINGS["bidirectional"]}).iloc[0]
    assert row["verdict"] == "unresolved" and row["note"] == "no seed has both sides" and row["n"] == 0


def test_a_study_is_checked_before_any_stage(study):
    good = {"arms": {"mlm": {}, "ar": {}}, "gate": {"min_below_unigram": 0.5},
            "findings": {"F1": registered(FINDINGS["bidirectional"])}}
    StudySpec.parse(good)
    for bad, match in [({"alpha": 1.5}, "alpha"), ({"gate": {"min_below": 0.5}}, "gate"),
                       ({"findings": {"F1": {**registered(FINDINGS["bidirectional"]), "registered": {}}}}, "registered"),
                       ({"findings": {"F1": {k: v for k, v in registered(FINDINGS["bidirectional"]).items()
                                             if k != "justification"}}}, "justification"),
                       ({"findings": {"F1": {**registered(FINDINGS["bidirectional"]), "a": {"arm": "mlm"}}}}, "exactly one"),
                       ({"checks": {"c": {"value": {"arm": "bert", "gap": {"min_distance": 1}}}}}, "bert")]:
        with pytest.raises(ValueError, match=match):
            StudySpec.parse({**good, **bad})


def test_power_beyond_reach_says_so_and_withdrawn_findings_are_listed(study):
    tiny_effect = registered(FINDINGS["nsp"], effect=1e-4)
    write_findings(study, StudySpec.parse({"findings": {"nsp": tiny_effect}, "withdrawn": {
        "F3_ag_faithful": {"registered": {"date": "2026-11-23", "commit": "660408b"}, "why": "true by construction"}}}))
    text = (study / "report" / "findings.md").read_text()
    assert "not at this scale" in text and "~10001" not in text
    assert "| F3_ag_faithful | 2026-11-23 at 660408b | true by construction |" in text


def test_blimp_accuracy_is_read_by_method_level_and_name(tmp_path):
    def report(pll: float, exact: float | None = None) -> dict:
        rows = lambda acc: [{"level": "overall", "name": "overall", "accuracy": acc},  # noqa: E731
                            {"level": "phenomenon", "name": "island_effects", "accuracy": acc - 0.1}]
        results = {"pll": rows(pll)} if exact is None else {"exact": rows(exact)}
        return {"blimp": {"results": results}}

    for seed, acc in ((1, 0.61), (2, 0.63)):
        write(tmp_path / "mlm" / f"seed{seed}" / "zeroshot" / "zeroshot.json", report(acc))
        write(tmp_path / "ar" / f"seed{seed}" / "zeroshot" / "zeroshot.json", report(0.0, exact=acc - 0.05))
    runs = StudyRuns.read(tmp_path)
    assert side_values(runs, {"arm": "mlm", "zeroshot": {"method": "pll"}}) == pytest.approx({1: 0.61, 2: 0.63})
    island = {"method": "pll", "level": "phenomenon", "name": "island_effects"}
    assert side_values(runs, {"arm": "mlm", "zeroshot": island}) == pytest.approx({1: 0.51, 2: 0.53})
    assert side_values(runs, {"arm": "ar", "zeroshot": {"method": "exact"}}) == pytest.approx({1: 0.56, 2: 0.58})
    with pytest.raises(ValueError, match="'pll' was not scored"):
        side_values(runs, {"arm": "ar", "zeroshot": {"method": "pll"}})
    with pytest.raises(ValueError, match="no field 'syntax'"):
        side_values(runs, {"arm": "mlm", "zeroshot": {"method": "pll", "level": "field", "name": "syntax"}})
