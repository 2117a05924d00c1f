"""The findings report: re-registered claims and checks marked, precision and wall time per seed, files written."""

import json

import pandas as pd

from armlm.analysis.findings.registrations import StudySpec
from armlm.analysis.reports.findings_report import wall_time_note, write_findings
from tests.helpers.findings import F1, FINDINGS, pretraining_summary, registered, write


def test_the_report_marks_re_registered_claims_and_lists_checks(study):
    tie = registered(FINDINGS["nsp"], kind="equivalence", effect=0.05, margin=0.05)
    tie["superseded"] = [{"test": {"kind": "superiority", "direction": "greater"},
                          "registered": {"date": "2026-11-23", "commit": "660408b"}, "why": "a tie is not a superiority"}]
    checks = {"mrf_u": {"what": "a convergence check", "value": {"arm": "mlm", "pairwise": {
        "kind": "random", "row": "mrf", "column": "u_ppl"}}}}
    write_findings(study, StudySpec.parse({"arms": {"mlm": {}, "mlm_nsp": {}}, "findings": {"nsp": tie}, "checks": checks}))
    text = (study / "report" / "findings.md").read_text()
    assert "nsp (re-registered after data)" in text and "was kind superiority" in text and "660408b" in text
    assert "equivalence, \\|A - B\\| < 0.05" in text
    assert "| mrf_u | a convergence check |" in text and "22.000 [" in text  # 21, 22, 23 over the seeds
    for verdict in ("reproduced", "contradicted", "unresolved", "not evidence"):
        assert f"- **{verdict}**:" in text
    # a claim added once some seeds had run says so, beside its registration
    late = registered(FINDINGS["nsp"])
    late["registered"] = {"date": "2026-11-25", "commit": "abc1234", "seen": "seed 1 of both arms"}
    write_findings(study, StudySpec.parse({"findings": {"nsp": late}}))
    text = (study / "report" / "findings.md").read_text()
    assert "nsp (registered after data)" in text and "abc1234, after seeing seed 1 of both arms" in text


def test_a_check_is_printed_beside_the_gate_of_the_arms_it_reads(study):
    """A descriptive value from a run that did not learn its objective is shown, and marked as such."""
    for seed in (1, 2, 3):
        for arm, below in (("mlm", 2.1), ("ar", 0.02 if seed == 2 else 0.05)):  # ar seed 2: 5.7 % of 0.35
            write(study / arm / f"seed{seed}" / "pretrain" / "summary.json", {
                "objective": "X", "steps": 10, "tokens_seen": 1000, "pred_tokens_seen": 900, "val_loss": 4.0,
                "val_loss_kind": "masked_token", "wall_seconds": 1.0,
                "unigram_baseline": 6.0, "own_below_unigram": {"all": below},
                "metrics": {"val/own_unigram": 5.8 if arm == "mlm" else 0.35}})
    checks = {"ar_minus_mlm": {"what": "descriptive", "value": {**F1, "arm": "ar", "relative_to": "mlm"}},
              "mlm_f1": {"what": "descriptive", "value": F1}}
    gated = {"arms": {"mlm": {}, "ar": {}}, "gate": {"own_share_below_unigram": 0.08}, "checks": checks}
    write_findings(study, StudySpec.parse(gated))
    rows = {line.split(" | ")[0][2:]: line for line in (study / "report" / "findings.md").read_text().splitlines()
            if line.startswith(("| ar_minus_mlm", "| mlm_f1"))}
    assert rows["ar_minus_mlm"].endswith("| **failed**: ar seed 2 is 5.7% of its baseline below it by its own loss "
                                         "(gate 0.08) |")
    assert "[-0.1, -0.13, -0.11]" in rows["ar_minus_mlm"]  # still printed: ar - mlm in each seed
    assert rows["mlm_f1"].endswith("| passed |")
    unread = {"electra_f1": {"what": "descriptive", "value": {**F1, "arm": "electra"}}}  # an arm not run yet
    write_findings(study, StudySpec.parse({**gated, "arms": {**gated["arms"], "electra": {}}, "checks": unread}))
    assert next(line for line in (study / "report" / "findings.md").read_text().splitlines()
                if line.startswith("| electra_f1")).endswith("| no run read |")
    write_findings(study, StudySpec.parse({**gated, "gate": {**gated["gate"], "min_above_majority": 0.71}}))  # mlm seed 1: 0.70
    mlm_row = next(line for line in (study / "report" / "findings.md").read_text().splitlines()
                   if line.startswith("| mlm_f1"))
    assert mlm_row.count("majority baseline") == 1  # a check's value is read as both sides: its failure said once
    assert "**failed**: " in mlm_row and "in seeds 1 (+0.700 above it)" in mlm_row
    write_findings(study, StudySpec.parse({"arms": gated["arms"], "checks": checks}))  # a study without a gate
    assert "| [0.7, 0.75, 0.72] | 0.723 [" in (text := (study / "report" / "findings.md").read_text())
    assert all(line.endswith("| - |") for line in text.splitlines() if line.startswith(("| ar_minus_mlm", "| mlm_f1")))


def test_the_report_says_which_precision_pretraining_ran_at_and_flags_a_mix(study):
    findings = {"findings": {"nsp": registered(FINDINGS["nsp"])}}
    for seed in (1, 2):
        for arm in ("mlm", "mlm_nsp"):
            pretraining_summary(study, arm, seed, None, "MaskedLM")
            path = study / arm / f"seed{seed}" / "pretrain" / "summary.json"
            path.write_text(json.dumps({**json.loads(path.read_text()), "precision": "32-true"}))
    write_findings(study, StudySpec.parse(findings))
    assert "Pretraining precision: 32-true." in (study / "report" / "findings.md").read_text()
    # seed 2's mlm_nsp resumed on a machine with bf16 units
    path = study / "mlm_nsp" / "seed2" / "pretrain" / "summary.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "precision": "bf16-mixed"}))
    write_findings(study, StudySpec.parse(findings))
    text = (study / "report" / "findings.md").read_text()
    assert "**Mixed precision" in text and "bf16-mixed: mlm_nsp/seed2." in text
    assert "32-true: mlm/seed1, mlm/seed2, mlm_nsp/seed1" in text


def test_the_report_gives_each_seeds_wall_minutes_from_its_stages(study):
    for seed, seconds in ((1, 600.0), (2, None)):
        write(study / "mlm" / f"seed{seed}" / "pretrain" / "stage.json", {"kind": "pretrain", "seconds": seconds})
        write(study / "mlm" / f"seed{seed}" / "finetune" / "conll2003-full" / "stage.json",
              {"kind": "finetune", "seconds": 120.0})
    write_findings(study, StudySpec.parse({"findings": {"nsp": registered(FINDINGS["nsp"])}}))
    text = (study / "report" / "findings.md").read_text()
    assert "seed 1: 12; seed 2: 2 (1 of 2 stages untimed)." in text


def test_the_wall_time_note_says_which_stages_kept_no_time_and_which_are_still_running():
    seconds = pd.DataFrame({"seed": [1, 1, 1, 2], "seconds": [600.0, float("nan"), 120.0, 60.0],
                            "running": [False, False, True, False]})
    assert wall_time_note(seconds) == ("Wall minutes per seed, the sum of its stages' launches: seed 1: 12 (1 of 3 "
                                       "stages untimed; 1 of 3 stages running, counted so far); seed 2: 1.")


def test_findings_files_are_written(study):
    written = write_findings(study, StudySpec.parse({"findings": {k: registered(FINDINGS[k]) for k in ("bidirectional", "nsp", "local_ar")}}))
    text = (study / "report" / "findings.md").read_text()
    assert "**reproduced**" in text and "**unresolved**" in text and "BERT Table 5" in text
    assert "Pretraining seeds paired by a row: [1, 2, 3]" in text
    assert len(pd.read_csv(written[1])) == 3
    assert written[2] == study / "report" / "findings.png" and written[2].read_bytes()[:4] == b"\x89PNG"
