"""Settings checked before a command reads anything: each a key, the types it takes, the range it must fall in, and
what a valid value looks like, so a bad one ends in one line naming the key, the value and the fix (training.validate
holds pretraining's and fine-tuning's tables; generate, evaluate and zeroshot keep theirs beside their commands)."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from armlm.common.errors import ArmlmError

NUMBER = (int, float)


@dataclass(frozen=True)
class Rule:
    key: str
    kinds: tuple[type, ...]  # accepted Python types (bool never passes for a number)
    ok: Callable[[Any], bool]
    expected: str  # what a valid value looks like, for the message
    optional: bool = False  # null allowed


def at_least(low: float) -> Callable[[Any], bool]:
    return lambda v: v >= low


def above(low: float) -> Callable[[Any], bool]:
    return lambda v: v > low


def count_or_share(v: Any) -> bool:
    """Lightning's int-or-float settings: a count (int >= 0) or a fraction of an epoch (0 <= float <= 1)."""
    return v >= 0 if isinstance(v, int) else 0.0 <= v <= 1.0


def any_value(v: Any) -> bool:
    """The type alone is checked here; the range, where a later check already names it with more context."""
    return True


def one_of(*choices: object) -> Callable[[Any], bool]:
    return lambda v: v in choices


def check_value(rule: Rule, value: Any) -> None:
    """Raise ArmlmError naming the key, the value and the fix where the value breaks the rule (a class that takes
    its settings as arguments checks them so)."""
    if value is None and rule.optional:
        return
    if (isinstance(value, bool) and bool not in rule.kinds) or not isinstance(value, rule.kinds) or not rule.ok(value):
        raise ArmlmError(f"{rule.key}={value!r}: expected {rule.expected}; fix it on the command line, "
                         f"e.g. {rule.key}=<value>")


def check_rules(cfg: DictConfig, rules: tuple[Rule, ...], betas_key: str | None = None) -> None:
    """Raise ValueError naming the key, the value and the fix for the first setting that breaks a rule (and, given
    betas_key, for AdamW's betas there)."""
    for rule in rules:
        check_value(rule, OmegaConf.select(cfg, rule.key, default=None))
    if betas_key is None:
        return
    betas = OmegaConf.select(cfg, betas_key, default=None)
    if (not isinstance(betas, (list, tuple)) and not OmegaConf.is_list(betas)) or len(betas) != 2 or not all(
            isinstance(b, NUMBER) and not isinstance(b, bool) and 0 <= b < 1 for b in betas):
        raise ArmlmError(f"{betas_key}={betas!r}: expected two numbers in [0, 1), e.g. {betas_key}=[0.9,0.98]")


def check_closed(cfg: DictConfig, closed: Mapping[str, Collection[str]]) -> None:
    """Nodes whose settings the command reads by name (an optimiser's, a step's: `closed`, each node's keys) hold
    those alone. Hydra's advice for a key the config lacks is to add it with +key=value, which it then composes and
    nothing reads: a typo ran the whole run with the default. Raise ArmlmError naming the keys nothing reads and the
    settings their node has."""
    for node, known in closed.items():
        settings = OmegaConf.select(cfg, node, default=None)
        unknown = [f"{node}.{key}" for key in (settings or {}) if key not in known]
        if unknown:
            raise ArmlmError(unread_settings(unknown, node, known))


def unread_settings(keys: list[str], node: str, known: Collection[str]) -> str:
    """The line refusing settings of `node` that nothing reads (`keys`, dotted), naming those it holds, after the
    ones a typo may have meant: those it begins (temp: temperature), else the closest."""
    meant = meant_among(keys[0].removeprefix(f"{node}.").split(".")[0], known)  # the part not in `node` ("": top)
    return (f"{', '.join(keys)}: armlm reads no such setting (added, e.g. with +{keys[0]}=..., it would change "
            f"nothing); " + (f"did you mean {' or '.join(meant)}? " if meant else "") +
            f"{node or 'the top level'} holds {', '.join(known)}")


def closed_keys(rules: tuple[Rule, ...], node: str, *elsewhere: str) -> tuple[str, ...]:
    """The settings of `node` that the rules name, and those checked elsewhere (`elsewhere`): all it may hold."""
    return tuple(rule.key.removeprefix(f"{node}.") for rule in rules if rule.key.startswith(f"{node}.")) + elsewhere


def meant_among(name: str, known: Collection[str]) -> list[str]:
    """The settings a typo `name` may have meant: those it begins (temp: temperature), else the closest."""
    return sorted((k for k in known if k.startswith(name)), key=len)[:3] or difflib.get_close_matches(
        name, list(known), n=1)
