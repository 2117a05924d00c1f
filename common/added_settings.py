"""Settings added on the command line (+key=value, ++key=value) that nothing would read, refused before a run starts.

Hydra answers a key the config lacks with `To append to your config use +key=value`, and then composes the added key
whatever it is: `armlm train +seeed=3` trained with seed 1234, `armlm zeroshot +blimp.max_pair=100` scored every pair.
A setting is read either by a class that takes it as an argument (a node with `_target_`, whose signature says what it
takes), by name where a command reads its config (the top level, optim, blimp, task, ...), or through an interpolation
(`seed=${my_seed}`): a key added to a node read by name is read only if the node already holds it. A command declares
the nodes whose readers take further keys of their own (Command.open_settings: a study's planner reads study.gate,
study.budget, ... where given), and their readers check those. The composition without the additions says what each
node holds. An argument the run passes a class itself (the data's seed) is refused when it is built
(training.setup.build); one a class passes on unseen (**kwargs), by the class that receives it.
"""

from __future__ import annotations

import inspect
from collections.abc import Collection, Sequence
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from hydra.utils import get_object
from omegaconf import DictConfig, OmegaConf

from armlm.common.config import compose_config
from armlm.common.errors import ArmlmError
from armlm.common.rules import unread_settings

ABSENT = object()


def check_added_settings(config: str, overrides: Sequence[str], cfg: DictConfig,
                         open_settings: Collection[str] = ()) -> None:
    """Raise ArmlmError naming a setting that `overrides` add to configs/<config>.yaml's composition (`cfg`) and that
    nothing reads: one that its node did not hold, its node's class does not take and no interpolation names, outside
    `open_settings`."""
    parsed = OverridesParser.create().parse_overrides(list(overrides))
    adds = {o.key_or_group for o in parsed if (o.is_add() or o.is_force_add()) and o.package is None
            and o.key_or_group != "hydra" and not o.key_or_group.startswith("hydra.")}
    if not adds:
        return
    groups = compose_config(config, list(overrides), with_hydra=True).hydra.runtime.choices  # +experiment=..., a
    added = sorted(key for key in adds if key not in groups)  # search path's groups too: options, not settings
    if not added:
        return
    try:
        before = composed_without(config, overrides, added)
    except HydraException:  # a group's defaults name an added key: it is read
        return
    after = OmegaConf.to_container(cfg, resolve=False)
    interpolations = " ".join(strings(after))
    for key in added:
        node, _, name = key.rpartition(".")
        parent = held(after, node)
        if (held(before, key) is not ABSENT or any(under(key, node) for node in open_settings)
                or (name.startswith("_") and held(before, node) is not ABSENT)  # Hydra's own (_partial_, ...)
                or read_by_interpolation(key, interpolations)):
            continue
        target = parent.get("_target_") if isinstance(parent, dict) and held(before, node) is not ABSENT else None
        if target is not None:
            check_argument(key, str(target))
            continue
        holder, known = deepest_node(before, key)
        raise ArmlmError(unread_settings([key], holder, list(known)))


def read_by_interpolation(key: str, interpolations: str) -> bool:
    """Whether an interpolation among `interpolations` (a config's string values, joined) reads the dotted `key` or a
    key beneath it (`${key}`, `${key.x}`, `${key:...}`)."""
    return any(f"${{{key}{end}" in interpolations for end in ("}", ".", ":"))


def under(key: str, node: str) -> bool:
    """Whether the dotted `key` is `node` or lies beneath it."""
    return key == node or key.startswith(f"{node}.")


def composed_without(config: str, overrides: Sequence[str], keys: Collection[str]) -> dict[str, Any]:
    """configs/<config>.yaml composed with `overrides` but those of `keys` and of the keys beneath them (+extra={a: 1}
    extra.a=2), as a plain config: what it holds without them. Raises what the composition raises."""
    parsed = OverridesParser.create().parse_overrides(list(overrides))
    kept = [line for line, o in zip(overrides, parsed) if not any(under(o.key_or_group, key) for key in keys)]
    return OmegaConf.to_container(compose_config(config, kept), resolve=False)


def deepest_node(tree: dict[str, Any], key: str) -> tuple[str, dict[str, Any]]:
    """The deepest node of a plain config on the way to the dotted `key` ("": the top level) and what it holds:
    where a key the config lacks would have had to be."""
    holder = key.rpartition(".")[0]
    while not isinstance(held(tree, holder), dict):
        holder = holder.rpartition(".")[0]
    return holder, held(tree, holder)


def held(tree: Any, key: str) -> Any:
    """The value at a dotted key of a plain config (list items by index; the whole config at ""), or ABSENT where it
    holds no such key."""
    for part in key.split(".") if key else ():
        if isinstance(tree, dict) and part in tree:
            tree = tree[part]
        elif isinstance(tree, list) and part.isdigit() and int(part) < len(tree):
            tree = tree[int(part)]
        else:
            return ABSENT
    return tree


def strings(tree: Any) -> list[str]:
    """Every string value of a plain config (interpolations unresolved among them)."""
    if isinstance(tree, dict):
        return [s for value in tree.values() for s in strings(value)]
    if isinstance(tree, list):
        return [s for value in tree for s in strings(value)]
    return [tree] if isinstance(tree, str) else []


def check_argument(key: str, target: str) -> None:
    """A key added to a node that builds `target` is one of its arguments, or the target takes any (**kwargs). A
    target that does not import is left to the run, which names it. Importing the target costs its imports
    (Lightning's, for a data module or the Trainer): paid only for a key added there."""
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
