"""What is not evidence: a row whose arm did not learn (the gate, read in every seed), a tie at a task's majority
baseline, a BLiMP score near chance, a bound inside its Monte-Carlo noise."""


import pytest

from armlm.analysis.findings.registrations import StudySpec
from armlm.analysis.reports.findings_report import findings_table
from tests.helpers.findings import (
    F1,
    FINDINGS,
    GATED,
    finetune_result,
    gate_report,
    judged,
    pretraining_summary,
    registered,
    write,
)


def test_a_tie_at_the_majority_baseline_is_not_evidence(tmp_path):
    """Two arms that both score the majority class tie by construction: the gate withholds the row."""
    for arm in ("electra", "mlm"):
        for seed in (1, 2, 3):
            path = tmp_path / arm / f"seed{seed}" / "finetune" / "rte-full" / "results.json"
            score = 0.53 + 0.001 * seed if arm == "mlm" or seed != 2 else 0.60
            write(path, {"task": "rte", "seed": seed, "mode": "full", "attention": "bidirectional",
                         "metrics": {"validation": {"accuracy": score}},
                         "majority_baseline": {"validation": {"accuracy": 0.527}}, "input_mask_share": 0.0,
                         "primary_metric": "accuracy"})
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
    StudySpec.parse({**study, "arms": {"electra": {}, "mlm": {}}})


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
    StudySpec.parse({"arms": GATED["arms"], **strict, "findings": {}})
    with pytest.raises(ValueError, match="clear_by_mc_stderrs"):
        StudySpec.parse({"arms": GATED["arms"], "gate": {"min_below_unigram": 0.5, "clear_by_mc_stderrs": -1},
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


def test_a_gate_names_only_its_rules_and_the_retired_chance_floor_is_refused():
    """min_above_chance (read accuracy near 0.5 as guessing) was retired for min_discrimination; a gate naming it, or
    any other unknown rule, is refused before any stage runs, naming the rules there are."""
    for rule in ({"min_above_chance": 0.05}, {"floor": 0.1}):
        with pytest.raises(ValueError, match=rf"unknown rules \['{next(iter(rule))}'\].*min_discrimination"):
            StudySpec.parse({"arms": {"mlm": {}}, "gate": {"min_below_unigram": 0.5, **rule}, "findings": {}})
    with pytest.raises(ValueError, match=r"min_discrimination=\{'alpha': 2\}"):
        StudySpec.parse({"arms": {"mlm": {}}, "gate": {"own_below_unigram": 0.5, "min_discrimination": {"alpha": 2}},
                             "findings": {}})
