"""What a study must register before its runs, checked before any stage runs (study.py), and the registrations as
its findings report prints them: each finding's claim, sides, test and registration (date, commit; `seen:` where
some seeds had run before it; `seeds:` the pretraining seeds its verdict is read on), the study's gate and error
rate, and its checks."""

from __future__ import annotations

from typing import Any

from analysis.findings import quantity_of
from analysis.gate import check_gate
from analysis.verdicts import ALPHA, DECIDES, Claim
from common.errors import ArmlmError

# withdrawn_after_data: {date, why}: a row found, after its data, not to test its claim. It stays in its family
# (Holm counts it, so no other row gains from its leaving) and its verdict reads "withdrawn".
FINDING_KEYS = {"claim", "anchor", "a", "b", "test", "justification", "registered", "superseded", "withdrawn_after_data"}
ITEM_TEST_KEYS = {"items", "draws", "seed", "decides"}
TEST_KEYS = {"kind", "direction", "smallest_effect", "margin"}


def registered_claim(finding_id: str, finding: dict[str, Any]) -> Claim:
    """The finding's claim, after checking that everything the report needs was registered."""
    unknown = set(finding) - FINDING_KEYS
    missing = {"claim", "anchor", "a", "b", "test", "justification", "registered"} - set(finding)
    if unknown or missing:
        raise ArmlmError(f"finding {finding_id}: unknown keys {sorted(unknown)}, missing {sorted(missing)}; a finding "
                         f"has {sorted(FINDING_KEYS)} (superseded and withdrawn_after_data optional)")
    withdrawn = finding.get("withdrawn_after_data")
    if withdrawn is not None and not (isinstance(withdrawn, dict) and withdrawn.get("date") and withdrawn.get("why")):
        raise ArmlmError(f"finding {finding_id}: withdrawn_after_data={withdrawn!r}; give {{date: YYYY-MM-DD, why: ...}}")
    for entry in [finding["registered"], *[e.get("registered", {}) for e in finding.get("superseded") or []]]:
        if not (isinstance(entry, dict) and entry.get("date") and entry.get("commit")):
            raise ArmlmError(f"finding {finding_id}: registered={entry!r}; give {{date: YYYY-MM-DD, commit: <hash>}} "
                             "(and seen: <which seeds had run>, where some had)")
    seeds = finding["registered"].get("seeds")
    if seeds is not None and not (isinstance(seeds, list) and seeds and len(set(seeds)) == len(seeds)
                                  and all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in seeds)):
        raise ArmlmError(f"finding {finding_id}: registered.seeds={seeds!r}; give the distinct positive pretraining "
                         "seeds its verdict is read on, e.g. seeds: [1, 2, 3, 4, 5], or leave it out")
    for side in ("a", "b"):
        quantity_of(finding[side])
    test = dict(finding["test"])
    if set(test) - TEST_KEYS:
        raise ArmlmError(f"finding {finding_id}: test keys {sorted(test)}; a test has {sorted(TEST_KEYS)}")
    try:
        return Claim(test["kind"], test["direction"], float(test["smallest_effect"]), float(test.get("margin", 0)))
    except (KeyError, ValueError) as err:
        raise ArmlmError(f"finding {finding_id}: {err}") from err


def check_registrations(study: dict[str, Any]) -> None:
    """A study's registrations, gate and error rate, checked before any stage runs (study.py)."""
    alpha = study.get("alpha", ALPHA)
    if not 0 < float(alpha) < 1:
        raise ArmlmError(f"study.alpha={alpha}; the family-wise error rate is in (0, 1)")
    check_gate(study.get("gate"))
    item_test = study.get("item_test")
    if item_test is not None and (not isinstance(item_test, dict) or set(item_test) - ITEM_TEST_KEYS
                                  or item_test.get("decides", "both") not in DECIDES
                                  or int(item_test.get("draws", 10_000)) < 1_000):
        raise ArmlmError(f"study.item_test={item_test}; give item_test: {{decides: both | seeds | items, draws: "
                         "<at least 1,000>, seed: <int>, items: <what is resampled>}} or leave it out (both decide)")
    for finding_id, finding in (study.get("findings") or {}).items():
        registered_claim(finding_id, finding)
    for check_id, check in (study.get("checks") or {}).items():
        arm = (check.get("value") or {}).get("arm")
        if arm not in study["arms"]:
            raise ArmlmError(f"check {check_id}: value.arm={arm!r} is not one of the arms {list(study['arms'])}")
        quantity_of(check["value"])


def at_registered_seeds(registered: dict[str, Any], seeds: list[int]) -> tuple[list[int], list[int], str]:
    """The seeds a row is judged on, of the `seeds` that have both its sides: those its registration names (every one
    where it names none); the registered seeds not read yet; and a note on both. A verdict read at each look as
    seeds land would spend the family's error rate once per look, so a row waits for all of its registered seeds."""
    named = registered.get("seeds")
    if named is None:
        return list(seeds), [], ""
    kept = [s for s in seeds if s in named]
    extra, to_come = [s for s in seeds if s not in named], [s for s in named if s not in seeds]
    notes = ([f"interim: {len(kept)} of its {len(named)} registered seeds; no verdict before {to_come} are read"]
             if to_come else [])
    notes += [f"seeds {extra} are not registered for this row: left out"] if extra else []
    return kept, to_come, "; ".join(notes)


def registration_text(registered: dict[str, Any]) -> str:
    # `seen`: what data the registration came after (a claim added once some seeds had run), printed so a
    # reader can discount it; the claim stays pre-registered for the seeds run after it.
    seen = f", after seeing {registered['seen']}" if registered.get("seen") else ""
    seeds = f"; read on seeds {registered['seeds']}" if registered.get("seeds") else ""
    return f"{registered.get('date')} at {registered.get('commit')}{seen}{seeds}"


def superseded_text(entry: dict[str, Any]) -> str:
    test = entry.get("test", {})
    what = ", ".join(f"{k} {v}" for k, v in test.items())
    return f"was {what or entry.get('claim', '?')} ({registration_text(entry.get('registered', {}))}): {entry.get('why', '')}"
