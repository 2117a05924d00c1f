"""Findings read from a study folder: per-seed values of each side, paired differences and verdicts."""

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from analysis.findings import NotComparable, StudyRuns, _representation, values
from analysis.findings_report import check_registrations, findings_table, wall_time_note, write_findings
from analysis.study import finetuning_runs, per_checkpoint, representation_runs

F1 = {"arm": "mlm", "finetune": "conll2003-full", "metric": "f1"}


def registered(finding: dict, kind: str = "superiority", effect: float = 0.01, margin: float = 0.0) -> dict:
    """A finding written in the short form (a, b, direction) as the study config registers it."""
    test = {"kind": kind, "direction": finding.get("direction", "greater"), "smallest_effect": effect}
    if margin:
        test["margin"] = margin
    return {"claim": "a claim", "anchor": "a paper", "justification": "from the paper",
            **{k: v for k, v in finding.items() if k != "direction"}, "test": test,
            "registered": {"date": "2026-11-24", "commit": "abc1234"}}


def judged(root: Path, findings: dict, adjust: bool = False, **study) -> pd.DataFrame:
    """Each finding judged alone (adjust=False) unless a test is about the family."""
    return findings_table(root, {"findings": {k: registered(f) for k, f in findings.items()}, **study}, adjust=adjust)


def write(path: Path, content: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(content))


def finetune_result(root: Path, arm: str, seed: int, folder: str, f1: float, finetune_seed: int | None = None) -> None:
    write(root / arm / f"seed{seed}" / "finetune" / folder / "results.json", {
        "task": "conll2003", "seed": finetune_seed or seed, "mode": "features" if "features" in folder else "full",
        "attention": "bidirectional", "metrics": {"validation": {"f1": f1}},
        "majority_baseline": {"validation": {"f1": 0.0}}, "input_mask_share": 0.0})


def diagnostics(root: Path, arm: str, seed: int, mrf_u: float, unary_u: float, gaps: list[tuple[int, float]],
                candidates: int | None = None) -> None:
    rows = {"mrf": {"u_ppl": mrf_u, "p_ppl": 10.0}, "mlm_unary": {"u_ppl": unary_u}}
    write(root / arm / f"seed{seed}" / "diagnostics" / "diagnostics.json", {
        "candidates": candidates,
        "pairwise": {"random": {"headline_joint": "ag", "rows": rows,
                                "per_pair": {"distance": [d for d, _ in gaps], "gap": {"ag": [g for _, g in gaps]}}}},
        "representations": {"shift": {"0.4": [{"layer": 1, "cosine": 0.9, "cka": 0.8},
                                              {"layer": 2, "cosine": 0.7 + 0.01 * seed, "cka": 0.6}]},
                            "geometry": []}})


@pytest.fixture
def study(tmp_path: Path) -> Path:
    return write_study(tmp_path)


def write_study(tmp_path: Path) -> Path:
    """Three seeds of fine-tuning scores (MLM above AR) and diagnostics, the findings below read."""
    for seed, (mlm, ar, nsp) in enumerate([(0.70, 0.60, 0.72), (0.75, 0.62, 0.70), (0.72, 0.61, 0.74)], 1):
        finetune_result(tmp_path, "mlm", seed, "conll2003-full", mlm)
        finetune_result(tmp_path, "ar", seed, "conll2003-full", ar)
        finetune_result(tmp_path, "mlm_nsp", seed, "conll2003-full", nsp)
        diagnostics(tmp_path, "mlm", seed, mrf_u=20.0 + seed, unary_u=15.0, gaps=[(1, 0.5 + 0.1 * seed), (4, 0.1), (7, 0.0)])
        diagnostics(tmp_path, "ar", seed, mrf_u=1.0, unary_u=1.0, gaps=[(1, 0.3), (3, 0.05 * seed)], candidates=20)
    return tmp_path


FINDINGS = {
    "bidirectional": {"claim": "MLM tags better", "anchor": "BERT Table 5", "direction": "greater",
                      "a": F1, "b": {**F1, "arm": "ar"}},
    "backwards": {"direction": "less", "a": F1, "b": {**F1, "arm": "ar"}},
    "nsp": {"direction": "greater", "a": F1, "b": {**F1, "arm": "mlm_nsp"}},
    "mrf": {"direction": "greater", "a": {"arm": "mlm", "pairwise": {"kind": "random", "row": "mrf", "column": "u_ppl"}},
            "b": {"arm": "mlm", "pairwise": {"kind": "random", "row": "mlm_unary", "column": "u_ppl"}}},
    "local_mlm": {"direction": "greater", "a": {"arm": "mlm", "gap": {"min_distance": 1, "max_distance": 1}},
                  "b": {"arm": "mlm", "gap": {"min_distance": 3}}},
    "local_ar": {"direction": "greater", "a": {"arm": "ar", "gap": {"min_distance": 1, "max_distance": 1}},
                 "b": {"arm": "ar", "gap": {"min_distance": 3}}},
    "shift": {"direction": "greater", "a": {"arm": "ar", "representation": {"measure": "shift_cosine@0.4", "layer": "last"}},
              "b": {"arm": "mlm", "representation": {"measure": "shift_cosine@0.4", "layer": 1}}},
}


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
    assert _representation(report, {"measure": "shift_left_cosine@0.4", "layer": "last"}) == 0.8
    assert _representation(report, {"measure": "shift_left_cka@0.4", "layer": 1}) == 0.98
    assert _representation(report, {"measure": "shift_cosine@0.4", "layer": "last"}) == 0.3  # unchanged
    for seed in (1, 2):
        write(tmp_path / "mlm" / f"seed{seed}" / "diagnostics" / "diagnostics.json",
              left_shift_report(0.8 + 0.01 * seed, 0.7))
    side = {"arm": "mlm", "representation": {"measure": "shift_left_cosine@0.4", "layer": "last"}}
    assert values(StudyRuns.read(tmp_path), side) == pytest.approx({1: 0.81, 2: 0.82})
    measures = set(representation_runs({("ar", 1): report})["measure"])
    assert {"shift_left_cosine@0.4", "shift_left_cka@0.4", "shift_cosine@0.4", "shift_cka@0.4"} <= measures
    # A report written before the section existed: not comparable (its finding unresolved), not a KeyError.
    with pytest.raises(NotComparable, match="shift_left"):
        _representation({"representations": {"shift": report["representations"]["shift"], "geometry": []}},
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


def test_findings_files_are_written(study):
    written = write_findings(study, {"findings": {k: registered(FINDINGS[k]) for k in ("bidirectional", "nsp", "local_ar")}})
    text = (study / "report" / "findings.md").read_text()
    assert "**reproduced**" in text and "**unresolved**" in text and "BERT Table 5" in text
    assert "Pretraining seeds [1, 2, 3]" in text
    assert len(pd.read_csv(written[1])) == 3


def likelihood_report(root: Path, arm: str, seed: int, nll: float, fingerprint: str = "same-blocks") -> None:
    write(root / arm / f"seed{seed}" / "diagnostics" / "diagnostics.json",
          {"likelihood": {"nll_per_token": nll, "blocks_fingerprint": fingerprint}})


def pretraining_summary(root: Path, arm: str, seed: int, val_likelihood: float | None, objective: str) -> None:
    write(root / arm / f"seed{seed}" / "pretrain" / "summary.json", {
        "objective": objective, "steps": 10, "tokens_seen": 1000, "pred_tokens_seen": 900, "val_loss": 5.0,
        "val_loss_kind": "next_token", "unigram_baseline": 6.0, "wall_seconds": 1.0, "metrics": {},
        "val_likelihood": val_likelihood, "flops_seen": 1e9, "epochs": 1.0})


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


def task_result(root: Path, arm: str, seed: int, task: str, metrics: dict[str, float]) -> None:
    write(root / arm / f"seed{seed}" / "finetune" / f"{task}-full" / "results.json", {
        "task": task, "seed": seed, "mode": "full", "attention": "bidirectional", "metrics": {"validation": metrics},
        "majority_baseline": {"validation": {k: 0.0 for k in metrics}}, "input_mask_share": 0.0})


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
    assert values(runs, {"arm": "mlm", "finetune_mean": side}) == pytest.approx({1: 0.495, 2: 0.5})
    row = judged(tmp_path, {"E1": {"a": {"arm": "electra", "finetune_mean": side},
                                   "b": {"arm": "mlm", "finetune_mean": side}}}).iloc[0]
    assert row["difference"] == pytest.approx(0.06) and row["n"] == 2  # (0.10 + 0.02) / 2 on seeds 1-2
    assert row["a"] == "electra: fine-tuned, mean of cola mcc, sst2 accuracy (full)"


def test_a_tie_at_the_majority_baseline_is_not_evidence(tmp_path):
    """Two arms that both score the majority class tie by construction: the gate withholds the row."""
    for arm in ("electra", "mlm"):
        for seed in (1, 2, 3):
            path = tmp_path / arm / f"seed{seed}" / "finetune" / "rte-full" / "results.json"
            score = 0.53 + 0.001 * seed if arm == "mlm" or seed != 2 else 0.60
            write(path, {"task": "rte", "seed": seed, "mode": "full", "attention": "bidirectional",
                         "metrics": {"validation": {"accuracy": score}},
                         "majority_baseline": {"validation": {"accuracy": 0.527}}, "input_mask_share": 0.0})
    tie = {"a": {"arm": "electra", "finetune": "rte-full", "metric": "accuracy"},
           "b": {"arm": "mlm", "finetune": "rte-full", "metric": "accuracy"}}
    study = {"findings": {"E3": registered(tie, kind="equivalence", effect=0.02, margin=0.02)},
             "gate": {"min_below_unigram": 0.0, "min_above_majority": 0.02}}
    for seed in (1, 2, 3):
        for arm in ("electra", "mlm"):
            pretraining_summary(tmp_path, arm, seed, 4.0, "X")
            gate_report(tmp_path, arm, seed, 1.0)
    row = findings_table(tmp_path, study).iloc[0]
    assert row["verdict"] == "not evidence"
    assert "mlm: finetune rte-full accuracy is within 0.02 of the majority baseline in seeds 1, 2, 3" in row["gate_note"]
    assert "electra: finetune rte-full accuracy is within 0.02 of the majority baseline in seeds 1, 3" in row["gate_note"]
    check_registrations({**study, "arms": {"electra": {}, "mlm": {}}})


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


def gate_report(root: Path, arm: str, seed: int, below: float, mc_stderr: float | None = None) -> None:
    """A likelihood section on the common scale (evaluate.py): nats below the unigram of the same targets; a
    Monte-Carlo standard error where the figure is the bound's estimate (an exact likelihood has none)."""
    path = root / arm / f"seed{seed}" / "diagnostics" / "diagnostics.json"
    report = json.loads(path.read_text()) if path.is_file() else {}
    likelihood = {"nll_per_token": 4.0, "below_unigram": below, "blocks_fingerprint": "b"}
    write(path, {**report, "likelihood": likelihood | ({"mc_stderr": mc_stderr} if mc_stderr is not None else {})})


GATED = {"arms": {"mlm": {}, "ar": {}, "mlm_nsp": {}, "mlm_late": {"from_arm": "mlm"}},
         "gate": {"min_below_unigram": 0.5}}


def test_the_gate_makes_a_row_not_evidence_whichever_way_it_points(study):
    for seed in (1, 2, 3):
        gate_report(study, "mlm", seed, 2.0)
        gate_report(study, "mlm_nsp", seed, 1.5)
        gate_report(study, "ar", seed, 2.0 if seed != 2 else 0.3)  # AR's seed 2 never learned
    table = judged(study, {k: FINDINGS[k] for k in ("bidirectional", "backwards", "nsp")}, **GATED).set_index("finding")
    # bidirectional would be reproduced and backwards contradicted: both read AR, so neither is evidence
    assert list(table.loc[["bidirectional", "backwards"], "verdict"]) == ["not evidence", "not evidence"]
    assert "ar seed 2 is 0.30 nats below unigram" in table.loc["bidirectional", "gate_note"]
    assert table.loc["bidirectional", "gate"] == pytest.approx(0.3)
    assert table.loc["nsp", "verdict"] == "unresolved" and table.loc["nsp", "gate"] == pytest.approx(1.5)
    gate_report(study, "ar", 2, 1.9)
    table = judged(study, {k: FINDINGS[k] for k in ("bidirectional", "backwards")}, **GATED).set_index("finding")
    assert list(table["verdict"]) == ["reproduced", "contradicted"]


def test_a_bound_inside_its_monte_carlo_noise_of_the_gate_has_not_cleared_it(study):
    # mlm_mask100 seed 2 of the findings study: 0.50003 nats below unigram at 4 draws, standard error 0.0087
    for seed in (1, 2, 3):
        gate_report(study, "mlm", seed, 0.50003 if seed == 2 else 1.0, mc_stderr=0.0087)
        gate_report(study, "ar", seed, 0.501)  # exact: no Monte-Carlo error, so 0.001 above the gate clears it
    strict = {**GATED, "gate": {"min_below_unigram": 0.5, "clear_by_mc_stderrs": 2}}
    rows = {k: FINDINGS[k] for k in ("bidirectional", "backwards")}
    assert list(judged(study, rows, **GATED)["verdict"]) == ["reproduced", "contradicted"]  # the rule not registered
    table = judged(study, rows, **strict)
    assert list(table["verdict"]) == ["not evidence", "not evidence"]  # withheld whichever way the row points
    noted = "mlm seed 2 is 0.5000 nats below unigram, within 2 Monte-Carlo standard errors (0.0087) of the gate 0.5"
    assert table["gate_note"].str.contains(noted, regex=False).all()
    assert not table["gate_note"].str.contains("ar seed").any()
    gate_report(study, "mlm", 2, 0.52, mc_stderr=0.0087)  # 0.52 - 2 x 0.0087 = 0.5026 clears it
    assert list(judged(study, rows, **strict)["verdict"]) == ["reproduced", "contradicted"]
    check_registrations({"arms": GATED["arms"], **strict, "findings": {}})
    with pytest.raises(ValueError, match="clear_by_mc_stderrs"):
        check_registrations({"arms": GATED["arms"], "gate": {"min_below_unigram": 0.5, "clear_by_mc_stderrs": -1},
                             "findings": {}})


def test_an_arm_reading_another_arms_run_is_gated_on_that_run(study):
    for seed in (1, 2, 3):
        gate_report(study, "ar", seed, 2.0)
        gate_report(study, "mlm", seed, 0.1 if seed == 3 else 2.0)
        finetune_result(study, "mlm_late", seed, "conll2003-full", 0.7)
    late = {"direction": "greater", "a": {**F1, "arm": "mlm_late"}, "b": {**F1, "arm": "ar"}}
    row = judged(study, {"late": late}, **GATED).iloc[0]
    assert row["verdict"] == "not evidence" and "mlm seed 3" in row["gate_note"]
    # no common-scale figure at all (mlm_nsp was never scored) is no evidence of learning either
    row = judged(study, {"one": FINDINGS["nsp"]}, **GATED).iloc[0]
    assert row["verdict"] == "not evidence" and "mlm_nsp seed 1 has no common-scale likelihood" in row["gate_note"]


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


def test_the_report_marks_re_registered_claims_and_lists_checks(study):
    tie = registered(FINDINGS["nsp"], kind="equivalence", effect=0.05, margin=0.05)
    tie["superseded"] = [{"test": {"kind": "superiority", "direction": "greater"},
                          "registered": {"date": "2026-11-23", "commit": "660408b"}, "why": "a tie is not a superiority"}]
    checks = {"mrf_u": {"what": "a convergence check", "value": {"arm": "mlm", "pairwise": {
        "kind": "random", "row": "mrf", "column": "u_ppl"}}}}
    write_findings(study, {"findings": {"nsp": tie}, "checks": checks})
    text = (study / "report" / "findings.md").read_text()
    assert "nsp (re-registered after data)" in text and "was kind superiority" in text and "660408b" in text
    assert "equivalence, \\|A - B\\| < 0.05" in text
    assert "| mrf_u | a convergence check |" in text and "22.000 [" in text  # 21, 22, 23 over the seeds
    for verdict in ("reproduced", "contradicted", "unresolved", "not evidence"):
        assert f"- **{verdict}**:" in text
    # a claim added once some seeds had run says so, beside its registration
    late = registered(FINDINGS["nsp"])
    late["registered"] = {"date": "2026-11-25", "commit": "abc1234", "seen": "seed 1 of both arms"}
    write_findings(study, {"findings": {"nsp": late}})
    text = (study / "report" / "findings.md").read_text()
    assert "nsp (registered after data)" in text and "abc1234, after seeing seed 1 of both arms" in text


def test_past_exit_reads_each_curve_the_same_steps_after_its_own_plateau_exit():
    from analysis.findings import likelihood_tag, past_exit

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


def test_the_gate_reads_every_seed_an_arm_ran_and_refuses_a_nan_margin(study):
    for seed in (1, 2, 3):
        gate_report(study, "mlm", seed, 2.0)
        gate_report(study, "ar", seed, 2.0)
    # seed 4's AR run exists but never gave a fine-tuning score, so the pair drops it: the gate still reads it
    pretraining_summary(study, "ar", 4, None, "AutoregressiveLM")
    gate_report(study, "ar", 4, 0.2)
    row = judged(study, {"bidirectional": FINDINGS["bidirectional"]}, **GATED).iloc[0]
    assert row["seeds"] == [1, 2, 3] and row["verdict"] == "not evidence" and "ar seed 4" in row["gate_note"]
    gate_report(study, "ar", 4, float("nan"))  # a diverged run has not learned
    assert "ar seed 4 is nan" in judged(study, {"b": FINDINGS["bidirectional"]}, **GATED).iloc[0]["gate_note"]


def test_a_row_without_paired_seeds_is_unresolved_and_says_why(tmp_path):
    finetune_result(tmp_path, "mlm", 1, "conll2003-full", 0.7)
    finetune_result(tmp_path, "ar", 2, "conll2003-full", 0.6)
    row = judged(tmp_path, {"one": FINDINGS["bidirectional"]}).iloc[0]
    assert row["verdict"] == "unresolved" and row["note"] == "no seed has both sides" and row["n"] == 0


def test_a_study_is_checked_before_any_stage(study):
    good = {"arms": {"mlm": {}, "ar": {}}, "gate": {"min_below_unigram": 0.5},
            "findings": {"F1": registered(FINDINGS["bidirectional"])}}
    check_registrations(good)
    for bad, match in [({"alpha": 1.5}, "alpha"), ({"gate": {"min_below": 0.5}}, "gate"),
                       ({"findings": {"F1": {**registered(FINDINGS["bidirectional"]), "registered": {}}}}, "registered"),
                       ({"findings": {"F1": {k: v for k, v in registered(FINDINGS["bidirectional"]).items()
                                             if k != "justification"}}}, "justification"),
                       ({"findings": {"F1": {**registered(FINDINGS["bidirectional"]), "a": {"arm": "mlm"}}}}, "exactly one"),
                       ({"checks": {"c": {"value": {"arm": "bert", "gap": {"min_distance": 1}}}}}, "bert")]:
        with pytest.raises(ValueError, match=match):
            check_registrations({**good, **bad})


def test_power_beyond_reach_says_so_and_withdrawn_findings_are_listed(study):
    tiny_effect = registered(FINDINGS["nsp"], effect=1e-4)
    write_findings(study, {"findings": {"nsp": tiny_effect}, "withdrawn": {
        "F3_ag_faithful": {"registered": {"date": "2026-11-23", "commit": "660408b"}, "why": "true by construction"}}})
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
    assert values(runs, {"arm": "mlm", "zeroshot": {"method": "pll"}}) == pytest.approx({1: 0.61, 2: 0.63})
    island = {"method": "pll", "level": "phenomenon", "name": "island_effects"}
    assert values(runs, {"arm": "mlm", "zeroshot": island}) == pytest.approx({1: 0.51, 2: 0.53})
    assert values(runs, {"arm": "ar", "zeroshot": {"method": "exact"}}) == pytest.approx({1: 0.56, 2: 0.58})
    with pytest.raises(ValueError, match="'pll' was not scored"):
        values(runs, {"arm": "ar", "zeroshot": {"method": "pll"}})
    with pytest.raises(ValueError, match="no field 'syntax'"):
        values(runs, {"arm": "mlm", "zeroshot": {"method": "pll", "level": "field", "name": "syntax"}})


def test_the_report_says_which_precision_pretraining_ran_at_and_flags_a_mix(study):
    findings = {"findings": {"nsp": registered(FINDINGS["nsp"])}}
    for seed in (1, 2):
        for arm in ("mlm", "mlm_nsp"):
            pretraining_summary(study, arm, seed, None, "MaskedLM")
            path = study / arm / f"seed{seed}" / "pretrain" / "summary.json"
            path.write_text(json.dumps({**json.loads(path.read_text()), "precision": "32-true"}))
    write_findings(study, findings)
    assert "Pretraining precision: 32-true." in (study / "report" / "findings.md").read_text()
    # seed 2's mlm_nsp resumed on a machine with bf16 units
    path = study / "mlm_nsp" / "seed2" / "pretrain" / "summary.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "precision": "bf16-mixed"}))
    write_findings(study, findings)
    text = (study / "report" / "findings.md").read_text()
    assert "**Mixed precision" in text and "bf16-mixed: mlm_nsp/seed2." in text
    assert "32-true: mlm/seed1, mlm/seed2, mlm_nsp/seed1" in text


def test_the_report_gives_each_seeds_wall_minutes_from_its_stages(study):
    for seed, seconds in ((1, 600.0), (2, None)):
        write(study / "mlm" / f"seed{seed}" / "pretrain" / "stage.json", {"kind": "pretrain", "seconds": seconds})
        write(study / "mlm" / f"seed{seed}" / "finetune" / "conll2003-full" / "stage.json",
              {"kind": "finetune", "seconds": 120.0})
    write_findings(study, {"findings": {"nsp": registered(FINDINGS["nsp"])}})
    text = (study / "report" / "findings.md").read_text()
    assert "seed 1: 12; seed 2: 2 (1 of 2 stages untimed)." in text


def test_a_blimp_row_near_chance_is_not_evidence_whichever_way_it_points(tmp_path):
    def blimp(root: Path, arm: str, seed: int, method: str, accuracy: float) -> None:
        write(root / arm / f"seed{seed}" / "zeroshot" / "zeroshot.json",
              {"blimp": {"results": {method: [{"level": "overall", "name": "overall", "accuracy": accuracy}]}}})

    for seed in (1, 2, 3):
        gate_report(tmp_path, "mlm", seed, 2.0)
        gate_report(tmp_path, "ar", seed, 2.0)
        blimp(tmp_path, "mlm", seed, "pll", 0.45 + 0.001 * seed)  # below chance: a systematic lean, not grammar
        blimp(tmp_path, "ar", seed, "exact", 0.52 + 0.001 * seed)
    pll_vs_exact = {"direction": "greater", "a": {"arm": "mlm", "zeroshot": {"method": "pll"}},
                    "b": {"arm": "ar", "zeroshot": {"method": "exact"}}}
    gate = {"min_below_unigram": 0.5, "min_above_chance": 0.05}
    arms = {"mlm": {}, "ar": {}}
    without_floor = judged(tmp_path, {"z": pll_vs_exact}, arms=arms, gate={"min_below_unigram": 0.5}).iloc[0]
    assert without_floor["verdict"] == "contradicted"  # a 0.07 gap between two guesses, resolved
    row = judged(tmp_path, {"z": pll_vs_exact}, arms=arms, gate=gate).iloc[0]
    assert row["verdict"] == "not evidence"
    near = "mlm: zeroshot method=pll is within 0.05 of chance 0.5 in seeds 1, 2, 3 (0.451, 0.452, 0.453)"
    assert near in row["gate_note"]
    assert "ar: zeroshot method=exact is within 0.05 of chance 0.5 in seeds 1, 2, 3 (0.521" in row["gate_note"]
    for seed in (1, 2, 3):  # both sides clear of chance: the row is judged again
        blimp(tmp_path, "mlm", seed, "pll", 0.70 + 0.01 * seed)
        blimp(tmp_path, "ar", seed, "exact", 0.60 + 0.003 * seed)
    assert judged(tmp_path, {"z": pll_vs_exact}, arms=arms, gate=gate).iloc[0]["verdict"] == "reproduced"
    with pytest.raises(ValueError, match="min_above_chance"):
        check_registrations({"arms": arms, "gate": {"min_below_unigram": 0.5, "floor": 0.1}, "findings": {}})


def test_the_wall_time_note_says_which_stages_kept_no_time_and_which_are_still_running():
    seconds = pd.DataFrame({"seed": [1, 1, 1, 2], "seconds": [600.0, float("nan"), 120.0, 60.0],
                            "running": [False, False, True, False]})
    assert wall_time_note(seconds) == ("Wall minutes per seed, the sum of its stages' launches: seed 1: 12 (1 of 3 "
                                       "stages untimed; 1 of 3 stages running, counted so far); seed 2: 1.")
