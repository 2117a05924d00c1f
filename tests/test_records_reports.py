"""Kept records are frozen, and the report code is held to golden tables.

Each kept study keeps its report as it was written (records/<record>/report/: the tables, written.json naming the
commit and launches that wrote them, and that commit's study and scale configs); today's code never re-derives it.
The report code is held instead to one fixture study per report kind: a slice of a frozen record (its first seeds),
rebuilt by `report=only` and compared with tests/golden/<kind>/ byte for byte, the run folder's path written as
<root>. Records never change, so only a change to the report code moves a golden table: rebuild them with
`pytest tests/test_records_reports.py --regold -m "slow or not slow"` and review the diff before committing it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from common.config import compose_config
from studies.run import run_study

REPO = Path(__file__).resolve().parents[1]
GOLDEN = REPO / "tests" / "golden"
# report kind -> the slice of a frozen record whose report is its fixture (the record's README command, fewer seeds)
FIXTURES = {
    # the study report and the findings family (equivalence rows, the own-loss gate)
    "findings": ["study=packing", "scale=cpu", "record=records/packing-cpu", "seeds=2"],
    # item intervals from items.json, epoch sides, interim rows (2 of 8 registered seeds)
    "items": ["study=decomposition_gutenwiki", "scale=gutenwiki", "record=records/decomposition-gutenwiki-cpu",
              "first_seed=14", "seeds=2"],
    # BLiMP tables and the coin-flip gate
    "blimp": ["study=zeroshot_gutenwiki", "scale=gutenwiki", "record=records/zeroshot-gutenwiki-cpu", "first_seed=2",
              "seeds=2"],
    # word benchmarks beside static and contextual features
    "embeddings": ["study=embeddings", "scale=cpu", "record=records/embeddings-v2-cpu", "first_seed=2", "seeds=2"],
    # each objective's curve against its budget in words
    "curves": ["study=curves", "scale=gutenwiki", "record=records/curves-gutenwiki-cpu", "seeds=1"],
}
RECORDS = sorted(p.parent for p in (REPO / "records").glob("*/report"))


def test_every_record_keeps_its_report_as_written_with_the_commit_and_config_that_wrote_it():
    folders = sorted(p for p in (REPO / "records").iterdir() if p.is_dir() and any(p.glob("*/seed*")))
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
    assert sorted(p.name for p in GOLDEN.iterdir()) == sorted(FIXTURES)


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(FIXTURES))
def test_report_only_over_a_fixture_rebuilds_its_golden_tables_byte_for_byte(kind, tmp_path, monkeypatch, request):
    monkeypatch.chdir(REPO)  # the record paths are the README's, relative to the checkout
    root = tmp_path / kind
    cfg = compose_config("study", [f"root={root}", "report=only", f"checkpoints_from={tmp_path / 'findings'}",
                                   *FIXTURES[kind]])
    assert run_study(cfg) == []
    written = {p.name: p.read_text().replace(str(root), "<root>")
               for p in sorted((root / "report").iterdir()) if p.suffix in (".md", ".csv")}
    golden = GOLDEN / kind
    if request.config.getoption("--regold"):
        golden.mkdir(exist_ok=True)
        for old in golden.glob("*"):
            old.unlink()
        for name, text in written.items():
            (golden / name).write_text(text)
    expected = sorted(p.name for p in golden.iterdir())
    assert sorted(written) == expected
    for name in expected:
        assert written[name] == (golden / name).read_text(), f"{kind}: report/{name} differs from the golden table"
