"""The docs state the interval level the code computes: analysis.findings.verdicts judges every claim, equivalence by TOST
included, with the two-sided (1 - alpha) interval (95 % at alpha 0.05), so a doc that calls it a 90 % interval
describes a test the code does not run."""

from __future__ import annotations

import re
from pathlib import Path

from armlm.analysis.findings.verdicts import ALPHA

REPO = Path(__file__).resolve().parents[1]
READ = [REPO / "README.md", REPO / "docs" / "findings.md"]
LEVEL = re.compile(r"(\d+(?:\.\d+)?) ?% (?:interval|CI|confidence interval)")


def test_every_interval_level_in_the_verdict_docs_is_the_codes():
    expected = round(100 * (1 - ALPHA), 6)
    found = {(path.name, float(level)) for path in READ for level in LEVEL.findall(path.read_text(encoding="utf-8"))}
    assert found, "the docs state no interval level: the check would pass vacuously"
    assert {level for _, level in found} == {expected}, sorted(found)


def test_the_check_catches_a_different_level():
    assert LEVEL.findall("its 90 % interval lies inside") == ["90"]
