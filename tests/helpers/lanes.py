"""Which cases of a parametrized test run in the fast lane (`pytest -m "not slow"`): every case runs in the full
suite, which CI runs; the fast lane keeps a representative few so that it stays under a minute on two cores."""

from __future__ import annotations

from collections.abc import Collection, Sequence

import pytest


def fast_lane_keeps(cases: Sequence[object], keep: Collection[object] = (), every: int = 0) -> list[object]:
    """`cases` for `pytest.mark.parametrize`, all marked slow but those in `keep` and, with `every`, every
    `every`-th case from the first (for long lists of refusals, where any few show the check runs). A case is a
    value, or a tuple for a parametrization of several names; ids come out as they would for the plain values."""
    missing = [case for case in keep if case not in cases]
    if missing or not (keep or every):
        raise ValueError(f"fast_lane_keeps: keep {missing or 'nothing'} of the cases {list(cases)}")
    kept = [case in keep or (every and index % every == 0) for index, case in enumerate(cases)]
    return [case if fast
            else pytest.param(*(case if isinstance(case, tuple) else (case,)), marks=pytest.mark.slow)
            for case, fast in zip(cases, kept)]
