"""The kept records still read as they were written: `report=only` over each study's record (records/, committed
results of older schema versions) rebuilds its tables byte for byte as the code of the commit before schema versions
wrote them (tests/golden/reports/<study>/, the run folder's path written as <root>). A commit that adds units to a
record rebuilds its tables with `pytest tests/test_records_reports.py -k <study> --regold`."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.config import compose_config
from studies.run import run_study

REPO = Path(__file__).resolve().parents[1]
# study -> what its README command gives (records/README.md), its scale included: the registration each record ran
# under (findings and embeddings were registered again in issue 46; the records' own registrations are study=<name>_v1).
# A record kept by several launches lists them (LAUNCHES): report=only restores only the seeds a launch plans, and
# the last launch's report covers every seed the root then holds.
KEPT = {"findings": ["study=findings_v1", "scale=cpu", "record=records/findings-cpu", "seeds=5"],
        "curricula": ["study=curricula", "scale=cpu", "record=records/curricula-cpu", "seeds=3"],
        "embeddings": ["study=embeddings_v1", "scale=cpu", "record=records/embeddings-cpu", "seeds=3"],
        # the registration of 26 November (issue 46): its first two seeds (the whole record is 1-5 and 9-13)
        "findings-v2": ["study=findings", "scale=cpu", "record=records/findings-v2-cpu", "seeds=2"],
        # issue 46's embeddings registration, at seeds 2-4 (seed 1's findings checkpoints were gone)
        "embeddings-v2": ["study=embeddings", "scale=cpu", "record=records/embeddings-v2-cpu", "first_seed=2", "seeds=3"],
        # issue 47's curves on gutenwiki-10m (its own scale), seed 1
        "curves-gutenwiki": ["study=curves", "scale=gutenwiki", "record=records/curves-gutenwiki-cpu", "seeds=1"],
        # issue 47's registered zero-shot findings at 20.05M words, seeds 2-5 then seed 9 (LAUNCHES), kept unit by
        # unit: the golden tables are rebuilt as units land
        "zeroshot-gutenwiki": ["study=zeroshot_gutenwiki", "scale=gutenwiki", "record=records/zeroshot-gutenwiki-cpu",
                               "first_seed=2", "seeds=4"],
        # issue 48's packing study, seeds 1-5, kept unit by unit: the golden tables are rebuilt as units land
        "packing": ["study=packing", "scale=cpu", "record=records/packing-cpu", "seeds=5"],
        # issue 72's decomposition on gutenwiki-10m, seeds 14-21 registered, kept seed by seed: the golden tables are
        # rebuilt as seeds land (first_seed and seeds: those kept)
        "decomposition-gutenwiki": ["study=decomposition_gutenwiki", "scale=gutenwiki",
                                    "record=records/decomposition-gutenwiki-cpu", "first_seed=14", "seeds=8"]}
LAUNCHES = {"zeroshot-gutenwiki": [[], ["first_seed=9", "seeds=1"]]}  # settings each launch adds to KEPT's


def test_every_kept_record_has_its_golden_tables():
    assert {f"{study}-cpu" for study in KEPT} == {p.parent.name for p in (REPO / "records").glob("*/report")}


@pytest.mark.slow
@pytest.mark.parametrize("study", sorted(KEPT))
def test_report_only_over_a_kept_record_rebuilds_its_tables_byte_for_byte(study, tmp_path, monkeypatch, request):
    monkeypatch.chdir(REPO)  # the record paths are the README's, relative to the checkout
    root, golden = tmp_path / study, REPO / "records" / f"{study}-cpu" / "report"
    for launch in LAUNCHES.get(study, [[]]):
        cfg = compose_config("study", [f"root={root}", "report=only",
                                       f"checkpoints_from={tmp_path / 'findings'}", *KEPT[study], *launch])
        assert run_study(cfg) == []
    # each table as the golden copy holds it: the run folder's path written as <root>
    written = {p.name: p.read_text().replace(str(root), "<root>")
               for p in sorted((root / "report").iterdir()) if p.suffix in (".md", ".csv")}
    if request.config.getoption("--regold"):
        for old in (golden).glob("*"):
            old.unlink()
        for name, text in written.items():
            (golden / name).write_text(text)
    expected = sorted(p.name for p in (golden).iterdir())
    assert sorted(written) == expected
    for name in expected:
        assert written[name] == (golden / name).read_text(), \
            f"{study}: report/{name} differs from the golden table"
