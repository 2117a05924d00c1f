"""records/rejudge_crossed.py: a kept study's findings re-judged under the crossed rule, its frozen report untouched,
and a retired gate's "not evidence" carried over."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import yaml

from armlm.analysis.findings.registrations import StudySpec
from armlm.analysis.reports.findings_report import write_findings
from tests.helpers.synthetic_studies import findings_study

REPO = Path(__file__).resolve().parents[1]
SPEC = importlib.util.spec_from_file_location("rejudge_crossed", REPO / "records" / "rejudge_crossed.py")
rejudge_crossed = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(rejudge_crossed)


def frozen_record(root: Path, gate: dict | None = None) -> dict:
    """The synthetic findings study kept as a record: its report written under the rule of its day (seeds alone),
    its registration beside it."""
    study = findings_study(root)
    write_findings(root, StudySpec.parse({**study, "findings": study["findings"]}))
    if gate is not None:
        study = {**study, "gate": gate}
    (root / "report" / "study.yaml").write_text(yaml.safe_dump({"study": study}))
    return study


def test_a_kept_study_is_re_judged_beside_its_frozen_report(tmp_path):
    frozen_record(tmp_path)
    frozen = (tmp_path / "report" / "findings.md").read_bytes()
    table = rejudge_crossed.rejudge(tmp_path).set_index("finding")
    assert (tmp_path / "report" / "findings.md").read_bytes() == frozen
    written = (tmp_path / "amended" / rejudge_crossed.AMENDMENT / "findings.md").read_text()
    assert written.startswith("# Findings of") and "re-judged under the crossed rule" in written
    assert table.loc["F1_mask", "verdict"] == "unresolved" and table.loc["F1_mask", "decided_by"] == "seeds and sentences"
    assert (table["written"] == table["verdict"]).all()  # the frozen report was written by today's code here


def test_a_retired_gate_rule_keeps_the_rows_it_found_not_evidence(tmp_path):
    frozen_record(tmp_path, gate={"min_below_unigram": 0.5, "min_above_chance": 0.05})  # v1's, since retired
    table = rejudge_crossed.rejudge(tmp_path).set_index("finding")
    assert table.loc["stalled", "verdict"] == "not evidence" and table.loc["F1", "verdict"] == "reproduced"
    # carried over into the diagnostic columns too: judged without the gate, seeds alone would say reproduced
    assert table.loc["stalled", ["seed_verdict", "item_verdict"]].tolist() == ["not evidence"] * 2
