"""Kept records are frozen, and the report code is held to golden tables.

Each kept study keeps its report as it was written (records/<record>/report/: the tables, written.json naming the
commit and launches that wrote them, and that commit's study and scale configs); today's code never re-derives it.
The report code is held instead to one synthetic study per report kind (tests.helpers.synthetic_studies: generated
here, from numbers and seeded draws, so neither the records nor configs/study/ move a golden table): its report
writers run on it as a study's report does (its report kind's, then the findings where it registers any) and every
.md and .csv under <root>/report is compared with tests/golden/<kind>/, the study folder's path written as <root>:
byte for byte, except that a CSV's floats written at full precision may differ in their last bits (one part in
1e13), which numpy's and BLAS's summation order moves from one CPU or release to another without any change to the
report code. Only a change to the report code (or to a generator) moves a golden table: rebuild them with
`pytest tests/test_records_reports.py --regold` and review the diff before committing it."""

from __future__ import annotations

import csv
import io
import json
import math
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from armlm.analysis.findings.registrations import StudySpec
from armlm.analysis.reports.blimp_report import write_blimp_report
from armlm.analysis.reports.curves_report import write_curves
from armlm.analysis.reports.embeddings_report import write_embeddings_report
from armlm.analysis.reports.findings_report import findings_table, write_findings
from armlm.analysis.reports.study_report import write_report
from tests.helpers.lanes import fast_lane_keeps
from tests.helpers.synthetic_studies import STUDIES

REPO = Path(__file__).resolve().parents[1]
GOLDEN = REPO / "tests" / "golden"
# report kind -> the writer of its study's own report (None: the study has only its findings); what each study
# exercises is its generator's docstring
FIXTURES: dict[str, Callable[[Path], object] | None] = {
    "findings": write_report,  # the study report beside every verdict, the own-loss gate and the checks
    "items": None,  # item intervals over documents, pairs and paradigms; epoch sides; an interim family
    "blimp": write_blimp_report,  # BLiMP tables beside the release's models; the coin-flip gate
    "embeddings": write_embeddings_report,  # word benchmarks per layer and static beside NER features
    "curves": write_curves,  # each objective's measures against its budget in words, a cooldown branch among them
}
RECORDS = sorted(p.parent for p in (REPO / "records").glob("*/report"))
# Records of a study still running keep only their units (records/README.md): their report is frozen when it ends.
RUNNING: set[str] = set()


def test_every_record_keeps_its_report_as_written_with_the_commit_and_config_that_wrote_it():
    folders = sorted(p for p in (REPO / "records").iterdir()
                     if p.is_dir() and any(p.glob("*/seed*")) and p.name not in RUNNING)
    assert not {p.name for p in RECORDS} & RUNNING, "a running record with a frozen report: take it off RUNNING"
    assert RECORDS == folders, "a record without its frozen report/ (or a report/ without a record)"
    shallow = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--is-shallow-repository"], capture_output=True,
                             text=True).stdout.strip()
    for record in RECORDS:
        written = json.loads((record / "report" / "written.json").read_text())
        for name in [*written["tables"], *written["config"].values()]:
            assert (record / "report" / name).is_file(), f"{record.name}: report/{name} is missing"
        assert written["launches"] and all(f"record=records/{record.name}" in launch for launch in written["launches"])
        if shallow == "false":  # a shallow clone need not hold the commit
            known = subprocess.run(["git", "-C", str(REPO), "cat-file", "-e", f"{written['commit']}^{{commit}}"])
            assert known.returncode == 0, f"{record.name}: written.json names commit {written['commit']}, unknown to git"


def test_every_fixture_has_its_golden_tables():
    assert sorted(p.name for p in GOLDEN.iterdir()) == sorted(FIXTURES) == sorted(STUDIES)


def cells_differing(written: str, golden: str) -> list[str]:
    """The cells of two CSV texts that differ: exactly, except full-precision floats within their last bits
    (close_numbers)."""
    rows, expected = (list(csv.reader(io.StringIO(text))) for text in (written, golden))
    if [len(row) for row in rows] != [len(row) for row in expected]:
        return ["the table's shape"]
    differing = []
    for line, (row, golden_row) in enumerate(zip(rows, expected), start=1):
        for column, (cell, golden_cell) in enumerate(zip(row, golden_row), start=1):
            if cell != golden_cell and not close_numbers(cell, golden_cell):
                differing.append(f"line {line}, column {column}: {cell!r}, golden {golden_cell!r}")
    return differing


def close_numbers(cell: str, golden_cell: str) -> bool:
    """Two floats written at full precision (Python's shortest repr, 15 significant digits or more) that differ in
    their last bits only; an integer, a shortened or reformatted number, or NaN's spelling is compared exactly."""
    return all(full_precision(c) for c in (cell, golden_cell)) and math.isclose(float(cell), float(golden_cell),
                                                                                rel_tol=1e-13, abs_tol=0.0)


def full_precision(cell: str) -> bool:
    try:
        value = float(cell)
    except ValueError:
        return False
    mantissa = cell.lower().split("e")[0].lstrip("+-").replace(".", "").lstrip("0")
    return math.isfinite(value) and repr(value) == cell and "." in cell and len(mantissa) >= 15


def test_a_golden_csv_forgives_last_bit_rounding_and_nothing_else():
    golden = "finding,p,n,verdict\nZ1,0.5582287107586223,651,unresolved\nZ2,nan,7,reproduced\n"
    assert cells_differing(golden.replace("0.5582287107586223", "0.5582287107586222"), golden) == []
    for changed, cell in (("0.5582287", "'0.5582287', golden '0.5582287107586223'"),  # printed with fewer digits
                          ("0.558228710759", "'0.558228710759', golden '0.5582287107586223'"),  # a 12-digit rounding
                          ("0.5582287107596223", "'0.5582287107596223', golden '0.5582287107586223'")):  # 2e-12 off
        assert cells_differing(golden.replace("0.5582287107586223", changed), golden) == [f"line 2, column 2: {cell}"]
    assert cells_differing(golden.replace(",651,", ",651.0,"), golden) == [
        "line 2, column 3: '651.0', golden '651'"]  # an integer column turned float
    assert cells_differing(golden.replace("unresolved", "reproduced"), golden) == [
        "line 2, column 4: 'reproduced', golden 'unresolved'"]
    assert cells_differing(golden.replace("nan", "NaN"), golden) != []
    assert cells_differing(golden.replace("nan", "0.1"), golden) != []
    assert cells_differing(golden + "Z3,0.1,1,unresolved\n", golden) == ["the table's shape"]


def folder_bytes(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("kind", sorted(STUDIES))
def test_a_synthetic_study_is_the_same_bytes_wherever_and_whenever_it_is_generated(kind, tmp_path):
    studies = [STUDIES[kind](tmp_path / name) for name in ("first", "second")]
    assert studies[0] == studies[1]
    first, second = folder_bytes(tmp_path / "first"), folder_bytes(tmp_path / "second")
    assert first and first == second  # nor does any artefact name its folder


@pytest.mark.parametrize("kind", fast_lane_keeps(sorted(FIXTURES), keep=["blimp", "embeddings", "items"]))
def test_the_reports_of_a_synthetic_study_rebuild_its_golden_tables(kind, tmp_path, request):
    root = tmp_path / kind
    study = STUDIES[kind](root)
    report = FIXTURES[kind]
    if report is not None:
        report(root)
    if study.get("findings"):
        write_findings(root, StudySpec.parse(study))
    written = {p.name: p.read_text().replace(str(root), "<root>")
               for p in sorted((root / "report").iterdir()) if p.suffix in (".md", ".csv")}
    golden = GOLDEN / kind
    if request.config.getoption("--regold"):  # written from the code under test, so nothing is compared in this run
        golden.mkdir(exist_ok=True)
        for old in golden.glob("*"):
            old.unlink()
        for name, text in written.items():
            (golden / name).write_text(text)
        pytest.skip(f"--regold wrote tests/golden/{kind}/ from the code under test: review its diff, then run "
                    "without --regold")
    expected = sorted(p.name for p in golden.iterdir())
    assert sorted(written) == expected
    for name in expected:
        if name.endswith(".csv"):
            differing = cells_differing(written[name], (golden / name).read_text())
            assert not differing, f"{kind}: report/{name} differs from the golden table at " + "; ".join(differing)
        else:
            assert written[name] == (golden / name).read_text(), f"{kind}: report/{name} differs from the golden table"


# What each synthetic study's findings were built to give (its generator's docstring), asserted on the verdicts
# themselves rather than on golden bytes, so a regold cannot move them: row -> verdict.
BUILT_TO_GIVE = {
    "findings": {"F1": "reproduced", "F1_mask": "unresolved", "SST2_tie": "reproduced", "features": "contradicted",
                 "shift": "unresolved", "stalled": "not evidence"},
    "items": dict.fromkeys(("F1@epoch1", "F1@epoch3", "F1", "Z1", "Z2"), "interim"),
    "blimp": {"Z1": "unresolved", "Z2": "reproduced", "Z3": "not evidence"},
    "embeddings": {"W1": "reproduced", "W2": "unresolved"},
}


@pytest.mark.parametrize("kind", sorted(BUILT_TO_GIVE))
def test_each_synthetic_study_gives_the_verdicts_it_was_built_to_give(kind, tmp_path):
    root = tmp_path / kind
    table = findings_table(root, STUDIES[kind](root)).set_index("finding")
    assert table["verdict"].to_dict() == BUILT_TO_GIVE[kind]
    if kind == "findings":  # the one-sentence gain: seeds alone say reproduced, the crossed interval holds it back
        held = table.loc["F1_mask"]
        assert (held["seed_verdict"], held["decided_by"]) == ("reproduced", "seeds and sentences")
        assert held["ci_low"] < 0 < held["seed_low"]
        assert table.loc["F1", "decided_by"] == "seeds and sentences" and table.loc["shift", "decided_by"] == "seeds"
    if kind == "items":  # documents where items.json keeps them; BLiMP pairs where both sides kept them
        assert table["decided_by"].to_dict() == {
            "F1@epoch1": "seeds and documents", "F1@epoch3": "seeds and documents", "F1": "seeds and documents",
            "Z1": "seeds and pairs within paradigms", "Z2": "seeds and paradigms"}
