"""A side of a finding, or a check's value, as a typed object: parsed once where the study is read
(analysis.findings.measures.parse_side checks it against its quantity), then read by the quantities, the gate, the
item bootstrap and the reports. Written in a study config as

    {arm: <arm>, <quantity>: <spec>[, metric: <m>, split: <s>, epoch: <k>][, relative_to: <arm> | {<key>: <value>}]}

where <quantity> is one key of analysis.findings.quantities.QUANTITIES, its spec that quantity's grammar, and the
options those the quantity takes. `relative_to` makes the side a difference: its own reading less a reference that
differs from it in another arm, or in the keys the mapping names."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any


@dataclass(frozen=True)
class Side:
    arm: str
    quantity: str  # its key in QUANTITIES
    spec: Any  # that quantity's spec, as written (a name, or a mapping of its grammar's keys)
    metric: str | None = None
    split: str | None = None
    epoch: int | None = None
    reference: Side | None = None  # relative_to: the reading this side's own is taken relative to
    __hash__ = None  # compared, never hashed: its spec is the config's mapping as written

    @property
    def plain(self) -> Side:
        """The side's own reading, without its reference."""
        return replace(self, reference=None)

    def arms(self) -> list[str]:
        """Every arm the side reads: its own, and its reference's where that is another arm."""
        other = self.reference.arm if self.reference is not None else self.arm
        return [self.arm] + ([other] if other != self.arm else [])

    def differs_only_in_arm(self, other: Side) -> bool:
        return all(getattr(self, f.name) == getattr(other, f.name) for f in fields(Side) if f.name != "arm")
