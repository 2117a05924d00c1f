"""analysis/findings/registrations.py: a finding registered on named seeds is read on those seeds only, and waits for all of
them before it gets a verdict; malformed seed lists are refused before any stage runs."""

import pytest

from armlm.analysis.findings.registrations import StudySpec
from armlm.analysis.reports.findings_report import findings_table, write_findings
from tests.helpers.findings import FINDINGS, GATED, finetune_result, gate_report, judged, registered


def on_seeds(finding: dict, seeds: list[int]) -> dict:
    row = registered(finding)
    return {**row, "registered": {**row["registered"], "seeds": seeds}}


def test_a_row_waits_for_every_registered_seed_before_its_verdict(study):
    """MLM leads AR by 0.10, 0.13 and 0.11 at seeds 1-3 (reproduced when no seeds are registered): registered on
    seeds 1-4, the same three seeds are a look, not a verdict, until seed 4 is read."""
    assert judged(study, {"F": FINDINGS["bidirectional"]})["verdict"].iloc[0] == "reproduced"
    rows = {"findings": {"F": on_seeds(FINDINGS["bidirectional"], [1, 2, 3, 4])}}
    row = findings_table(study, rows, adjust=False).iloc[0]
    assert row["verdict"] == "interim" and row["seeds_to_come"] == [4] and row["n"] == 3
    assert row["difference"] == pytest.approx((0.10 + 0.13 + 0.11) / 3)
    assert "interim: 3 of its 4 registered seeds; no verdict before [4] are read" in row["note"]
    markdown = (write_findings(study, StudySpec.parse(rows))[0]).read_text()
    assert "**interim**" in markdown and "- **interim**: " in markdown and "read on seeds [1, 2, 3, 4]" in markdown
    finetune_result(study, "mlm", 4, "conll2003-full", 0.71)
    finetune_result(study, "ar", 4, "conll2003-full", 0.60)
    row = findings_table(study, rows, adjust=False).iloc[0]
    assert row["verdict"] == "reproduced" and row["seeds_to_come"] == [] and row["n"] == 4 and row["note"] == ""


def test_seeds_outside_the_registration_are_left_out_and_named(study):
    row = findings_table(study, {"findings": {"F": on_seeds(FINDINGS["bidirectional"], [1, 2])}}, adjust=False).iloc[0]
    assert row["seeds"] == [1, 2] and row["n"] == 2 and row["difference"] == pytest.approx((0.10 + 0.13) / 2)
    assert row["verdict"] != "interim" and "seeds [3] are not registered for this row: left out" in row["note"]


def test_a_gate_failed_at_a_seed_already_read_is_final(study):
    for seed in (1, 2, 3):
        gate_report(study, "mlm", seed, 2.0)
        gate_report(study, "ar", seed, 2.0 if seed != 2 else 0.3)  # AR's seed 2 never learned
    row = findings_table(study, {"findings": {"F": on_seeds(FINDINGS["bidirectional"], [1, 2, 3, 4])}, **GATED},
                         adjust=False).iloc[0]
    assert row["verdict"] == "not evidence" and row["seeds_to_come"] == [4]


@pytest.mark.parametrize("seeds", [[], [0, 1], [1, 1], 3, [1.5], [True, 2], ["1"]])
def test_a_malformed_seed_list_is_refused_before_any_stage(seeds):
    good = {"arms": {"mlm": {}, "ar": {}}, "findings": {"F": on_seeds(FINDINGS["bidirectional"], [1, 2, 3, 4, 5])}}
    StudySpec.parse(good)
    with pytest.raises(ValueError, match=r"registered.seeds=.*give the distinct positive pretraining seeds"):
        StudySpec.parse({**good, "findings": {"F": on_seeds(FINDINGS["bidirectional"], seeds)}})


def test_under_holm_a_complete_row_stays_interim_while_another_row_of_its_family_waits(study):
    rows = {"findings": {"done": on_seeds(FINDINGS["bidirectional"], [1, 2, 3]),
                         "waits": on_seeds(FINDINGS["bidirectional"], [1, 2, 3, 4])}}
    table = findings_table(study, rows, adjust=True).set_index("finding")
    assert list(table["verdict"]) == ["interim", "interim"]
    assert "the Holm family's are not" in table.loc["done", "note"]
    separately = findings_table(study, rows, adjust=False)  # unadjusted rows do not depend on each other
    assert list(separately["verdict"]) == ["reproduced", "interim"]
