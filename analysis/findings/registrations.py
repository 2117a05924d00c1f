"""What a study must register before its runs, parsed and checked once into a typed StudySpec before any stage runs
(`armlm study`), and the registrations as its findings report prints them: each finding's claim, sides, test and
registration (date, commit; `seen:` where this row's own comparison had been measured on its data before it, which
marks the row "registered after data"; `prior:` what was known from other data; `seeds:` the pretraining seeds its
verdict is read on), the study's gate and error rate, its item test and its checks."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, dataclass, fields
from typing import Any

from armlm.analysis.findings.gate import Gate, GatedArm
from armlm.analysis.findings.items import ITEM_DRAWS, ITEM_UNITS
from armlm.analysis.findings.measures import parse_side
from armlm.analysis.findings.sides import Side
from armlm.analysis.findings.verdicts import ALPHA, DECIDES, Claim
from armlm.common.errors import ArmlmError


def _keys(cls: type) -> set[str]:
    return {f.name for f in fields(cls)}


def _required(cls: type) -> set[str]:
    return {f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING}


@dataclass(frozen=True)
class Registration:
    """When a claim was registered. `seen`: what data it came after (a claim added once some seeds had run), printed
    so a reader can discount it, and marking the row "registered after data"; the claim stays pre-registered for the
    seeds run after it. `prior`: what was known beforehand from other data (another corpus, an earlier study), printed,
    not marked. `seeds`: the pretraining seeds its verdict is read on (None: every seed both sides have)."""

    date: str
    commit: str
    seen: str | None = None
    prior: str | None = None
    seeds: tuple[int, ...] | None = None

    @staticmethod
    def parse(where: str, raw: Any) -> Registration:
        if not (isinstance(raw, Mapping) and raw.get("date") and raw.get("commit")) or set(raw) - _keys(Registration):
            raise ArmlmError(f"{where}: registered={raw!r}; give {{date: YYYY-MM-DD, commit: <hash>}} (and seen: <which "
                             "seeds had run>, where some had; prior: <what other data showed>; seeds: [...])")
        seeds = raw.get("seeds")
        if seeds is not None and not (isinstance(seeds, list | tuple) and seeds and len(set(seeds)) == len(seeds) and
                                      all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in seeds)):
            raise ArmlmError(f"{where}: registered.seeds={seeds!r}; give the distinct positive pretraining seeds its "
                             "verdict is read on, e.g. seeds: [1, 2, 3, 4, 5], or leave it out")
        return Registration(str(raw["date"]), str(raw["commit"]), raw.get("seen"), raw.get("prior"),
                            None if seeds is None else tuple(seeds))

    def text(self) -> str:
        seen = f", after seeing {self.seen}" if self.seen else ""
        prior = f", knowing {self.prior}" if self.prior else ""
        seeds = f"; read on seeds {list(self.seeds)}" if self.seeds else ""
        return f"{self.date} at {self.commit}{seen}{prior}{seeds}"


@dataclass(frozen=True)
class Superseded:
    """An earlier registration of a row, kept when its claim changed: when, why, and what it said then (the keys
    that changed, as written)."""

    registered: Registration
    why: str
    earlier: dict[str, Any]

    @staticmethod
    def parse(where: str, raw: Any) -> Superseded:
        if not (isinstance(raw, Mapping) and raw.get("why")):
            raise ArmlmError(f"{where}: superseded entry {raw!r}; give {{registered: {{date, commit}}, why: ..., "
                             "<the keys it changed, as they were>}")
        earlier = {k: v for k, v in raw.items() if k not in ("registered", "why")}
        return Superseded(Registration.parse(f"{where}: superseded", raw.get("registered")), str(raw["why"]), earlier)

    def text(self) -> str:
        test = self.earlier.get("test") or {}
        what = ", ".join(f"{k} {v}" for k, v in test.items())
        return f"was {what or self.earlier.get('claim', '?')} ({self.registered.text()}): {self.why}"


def _exactly(where: str, raw: Any, keys: tuple[str, ...]) -> Mapping[str, Any]:
    if not (isinstance(raw, Mapping) and set(raw) == set(keys) and all(raw.get(k) for k in keys)):
        raise ArmlmError(f"{where}={raw!r}; give {{{', '.join(keys)}}}")
    return raw


@dataclass(frozen=True)
class Withdrawal:
    """`withdrawn_after_data: {date, why}`: a row kept in its family, found after its data not to test its claim."""

    date: str
    why: str

    @staticmethod
    def parse(where: str, raw: Any) -> Withdrawal:
        raw = _exactly(where, raw, ("date", "why"))
        return Withdrawal(str(raw["date"]), str(raw["why"]))

    def text(self) -> str:
        return f"withdrawn {self.date}: {self.why}"


@dataclass(frozen=True)
class Withdrawn:
    """An entry of a study's `withdrawn: {<id>: {registered, why}}`: a row registered earlier, no longer tested."""

    registered: Registration
    why: str

    @staticmethod
    def parse(where: str, raw: Any) -> Withdrawn:
        raw = _exactly(where, raw, ("registered", "why"))
        return Withdrawn(Registration.parse(where, raw["registered"]), str(raw["why"]))


@dataclass(frozen=True)
class Check:
    """A quantity reported with its interval and never judged: what it shows, and the side it reads."""

    what: str
    value: Side


@dataclass(frozen=True)
class Finding:
    """One registered row of a study's family."""

    claim: str
    anchor: str
    a: Side  # {arm, <one quantity of analysis.findings.quantities>, ...} (analysis.findings.sides)
    b: Side
    test: Claim  # registered as {kind, direction, smallest_effect, margin}
    justification: str
    registered: Registration
    superseded: tuple[Superseded, ...] = ()  # earlier registrations, kept when a claim changed
    # a row found, after its data, not to test its claim. It stays in its family (Holm counts it, so no other row
    # gains from its leaving) and its verdict reads "withdrawn".
    withdrawn_after_data: Withdrawal | None = None
    # The items the claim generalises over, which the item bootstrap resamples (analysis.findings.items.ITEM_UNITS): None
    # leaves it to what the sides kept (CoNLL documents where known, BLiMP pairs within paradigms where kept).
    items: str | None = None

    @staticmethod
    def parse(finding_id: str, raw: Mapping[str, Any]) -> Finding:
        """The finding, after checking that everything the report needs was registered."""
        unknown, missing = set(raw) - _keys(Finding), _required(Finding) - set(raw)
        if unknown or missing:
            raise ArmlmError(f"finding {finding_id}: unknown keys {sorted(unknown)}, missing {sorted(missing)}; a "
                             f"finding has {sorted(_keys(Finding))} (superseded and withdrawn_after_data optional)")
        items = raw.get("items")
        if items is not None and items not in ITEM_UNITS:
            raise ArmlmError(f"finding {finding_id}: items={items!r}; choose one of {ITEM_UNITS} (what its "
                             "claim generalises over), or leave it out")
        withdrawn = raw.get("withdrawn_after_data")
        if withdrawn is not None:
            withdrawn = Withdrawal.parse(f"finding {finding_id}: withdrawn_after_data", withdrawn)
        superseded = tuple(Superseded.parse(f"finding {finding_id}", e) for e in raw.get("superseded") or ())
        a, b = (parse_side(raw[key], f"finding {finding_id}: {key}") for key in ("a", "b"))
        test, claim_keys = raw["test"], _keys(Claim)
        if not isinstance(test, Mapping) or set(test) - claim_keys:
            raise ArmlmError(f"finding {finding_id}: test={test!r}; a test has {sorted(claim_keys)}")
        try:
            claim = Claim(test["kind"], test["direction"], float(test["smallest_effect"]), float(test.get("margin", 0)))
        except (KeyError, ValueError, TypeError) as err:
            raise ArmlmError(f"finding {finding_id}: {err}") from err
        return Finding(**{**raw, "a": a, "b": b, "test": claim, "superseded": superseded,
                          "withdrawn_after_data": withdrawn,
                          "registered": Registration.parse(f"finding {finding_id}", raw["registered"])})


@dataclass(frozen=True)
class ItemTest:
    """Which test decides a row (None: none registered, so the crossed interval decides; studies registered before
    4 December 2026 said `both`), and the bootstrap's settings."""

    decides: str | None = None
    draws: int = ITEM_DRAWS
    seed: int = 0
    items: str = ""  # what is resampled, in words

    @staticmethod
    def parse(raw: Mapping[str, Any] | None) -> ItemTest:
        try:
            item_test = ItemTest(**dict(raw or {}))
            valid = item_test.decides in (None, *DECIDES) and int(item_test.draws) >= 1_000
        except TypeError:
            valid = False
        if not valid:
            raise ArmlmError(f"study.item_test={raw}; give item_test: {{decides: {' | '.join(DECIDES)}, draws: "
                             "<at least 1,000>, seed: <int>, items: <what is resampled>}} or leave it out (crossed)")
        return item_test


@dataclass(frozen=True)
class StudySpec:
    """What a study's findings report reads of its config, parsed and validated once."""

    arms: dict[str, GatedArm]  # what the gate reads of each arm (the planner parses the rest: studies.arms)
    findings: dict[str, Finding]
    checks: dict[str, Check]
    withdrawn: dict[str, Withdrawn]
    gate: Gate | None
    alpha: float
    item_test: ItemTest

    # the keys of a study config that parse reads (studies.run holds a study's config to these and its planner's)
    SETTINGS = ("alpha", "gate", "arms", "checks", "findings", "withdrawn", "item_test")

    @staticmethod
    def parse(study: Mapping[str, Any]) -> StudySpec:
        alpha = float(study.get("alpha", ALPHA))
        if not 0 < alpha < 1:
            raise ArmlmError(f"study.alpha={alpha}; the family-wise error rate is in (0, 1)")
        gate = Gate.parse(study.get("gate"))
        arms = {name: GatedArm.parse(name, {} if arm is None else arm) for name, arm in (study.get("arms") or {}).items()}
        checks = {}
        for check_id, check in (study.get("checks") or {}).items():
            if not (isinstance(check, Mapping) and set(check) <= {"what", "value"} and "value" in check):
                raise ArmlmError(f"check {check_id}={check!r}; give {{what: <words>, value: <a side>}}")
            checks[check_id] = Check(str(check.get("what", "")), parse_side(check["value"], f"check {check_id}: value"))
        findings = {fid: Finding.parse(fid, f) for fid, f in (study.get("findings") or {}).items()}
        if arms:  # a family judged from its rows alone (tests' synthetic folders) names no arms to check against
            read = [(f"finding {fid}: {key}", side) for fid, f in findings.items() for key, side in (("a", f.a), ("b", f.b))]
            for where, side in read + [(f"check {cid}: value", c.value) for cid, c in checks.items()]:
                named = [("arm", side.arm)] + ([("relative_to", side.reference.arm)] if side.reference else [])
                for key, arm in named:
                    if arm not in arms:
                        raise ArmlmError(f"{where}.{key}={arm!r} is not one of the arms {list(arms)}")
        withdrawn = {fid: Withdrawn.parse(f"withdrawn {fid}", w)
                     for fid, w in (study.get("withdrawn") or {}).items()}
        return StudySpec(arms, findings, checks, withdrawn, gate, alpha, ItemTest.parse(study.get("item_test")))


def at_registered_seeds(registered: Registration, seeds: list[int]) -> tuple[list[int], list[int], str]:
    """The seeds a row is judged on, of the `seeds` that have both its sides: those its registration names (every one
    where it names none); the registered seeds not read yet; and a note on both. A verdict read at each look as
    seeds land would spend the family's error rate once per look, so a row waits for all of its registered seeds."""
    named = registered.seeds
    if named is None:
        return list(seeds), [], ""
    kept = [s for s in seeds if s in named]
    extra, to_come = [s for s in seeds if s not in named], [s for s in named if s not in seeds]
    notes = ([f"interim: {len(kept)} of its {len(named)} registered seeds; no verdict before {to_come} are read"]
             if to_come else [])
    notes += [f"seeds {extra} are not registered for this row: left out"] if extra else []
    return kept, to_come, "; ".join(notes)
