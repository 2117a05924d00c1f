"""Settings added on the command line (+key=value, ++key=value) that nothing would read, refused before a run starts.

Hydra answers a key the config lacks with `To append to your config use +key=value`, and then composes the added key
whatever it is: `armlm train +seeed=3` trained with seed 1234, `armlm zeroshot +blimp.max_pair=100` scored every pair.
A setting is read either by a class that takes it as an argument (a node with `_target_`, whose signature says what it
takes) or by name, where a command reads its config (the top level, optim, blimp, task, ...): a key added to such a
node is read only if the node already holds it. A command declares the nodes whose readers take further keys of their
own (Command.open_settings: a study's planner reads study.gate, study.budget, ... where given), and their
readers check those. The composition without the additions says what each node holds.
"""

from __future__ import annotations

import inspect
from collections.abc import Collection, Sequence
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.utils import get_object
from omegaconf import DictConfig, OmegaConf

from armlm.common.config import CONFIGS, compose_config
from armlm.common.errors import ArmlmError
from armlm.common.rules import unread_settings


def check_added_settings(config: str, overrides: Sequence[str], cfg: DictConfig,
                         open_settings: Collection[str] = ()) -> None:
    """Raise ArmlmError naming each setting that `overrides` add to configs/<config>.yaml's composition (`cfg`) and
    that nothing reads: one that neither its node held before nor its node's class takes, outside `open_settings`."""
    parsed = OverridesParser.create().parse_overrides(list(overrides))
    added = [o.key_or_group for o in parsed if (o.is_add() or o.is_force_add()) and o.package is None
             and not o.key_or_group.startswith("hydra.") and not (CONFIGS / o.key_or_group).is_dir()]
    if not added:
        return
    try:
        before = compose_config(config, [line for line, o in zip(overrides, parsed) if o.key_or_group not in added])
    except Exception:  # noqa: BLE001 - the config needs an added key to compose (an interpolation reads it): read
        return
    before = OmegaConf.to_container(before, resolve=False)
    after = OmegaConf.to_container(cfg, resolve=False)
    for key in added:
        node, _, name = key.rpartition(".")
        if name.startswith("_") or held(before, key) is not ABSENT or any(key == o or key.startswith(f"{o}.") for o in open_settings):
            continue
        parent = held(after, node)
        target = parent.get("_target_") if isinstance(parent, dict) else None
        if target is not None:
            check_argument(key, str(target))
            continue
        holder = node  # the deepest node the composition held: where the key would have had to be
        while not isinstance(held(before, holder), dict):
            holder = holder.rpartition(".")[0]
        known = held(before, holder)
        raise ArmlmError(unread_settings([key], holder, list(known)))


ABSENT = object()


def held(tree: dict[str, Any], key: str) -> Any:
    """The value at a dotted key of a plain config (the whole config at ""), or ABSENT where it holds no such key."""
    for part in key.split(".") if key else ():
        if not isinstance(tree, dict) or part not in tree:
            return ABSENT
        tree = tree[part]
    return tree


def check_argument(key: str, target: str) -> None:
    """A key added to a node that builds `target` is one of its arguments, or the target takes any (**kwargs). A
    target that does not import is left to the run, which names it."""
    try:
        parameters = inspect.signature(get_object(target)).parameters
    except (ImportError, AttributeError, ValueError, TypeError):
        return
    name = key.rpartition(".")[2]
    if name in parameters or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return
    takes = [p for p, spec in parameters.items() if p != "self" and spec.kind is not inspect.Parameter.VAR_POSITIONAL]
    raise ArmlmError(f"{key}: {target} takes no argument {name} (added, e.g. with +{key}=..., it would fail when "
                     f"built); it takes {', '.join(takes)}")
