"""A command line whose settings do not compose, in one line naming the problem and the fix.

Hydra's own report of a misspelt key is five lines ending in `To append to your config use +optim.lrr=1`, advice that
is right for an argument a class takes and that its YAML leaves out (+objective.fixed_count=true) and wrong where a
command reads its settings by name (common.added_settings then refuses the added key). A missing config group option
is a list of the options, one a line, and the search path. `armlm <command>` composes its command line once before
Hydra does (common.commands.run_hydra), and a study each stage's (studies.runner), to say these in one line. Any
other failure (a sweep's value without -m, a YAML that does not parse) is left to Hydra's report, whose remedies and
file positions a line would lose.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from itertools import takewhile

from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException
from omegaconf.errors import ConfigAttributeError, ConfigKeyError

from armlm.common.added_settings import composed_without, deepest_node, under
from armlm.common.config import compose_config
from armlm.common.rules import meant_among

MISSING_KEY = (ConfigKeyError, ConfigAttributeError)  # omegaconf's, for a key a config node does not hold


def why_it_does_not_compose(config: str, overrides: Sequence[str],
                            open_settings: Collection[str] = ()) -> str | None:
    """The line saying why configs/<config>.yaml does not compose with `overrides`; None where it composes, or where
    Hydra's own report says it better. `open_settings`: nodes whose readers take keys the config leaves out
    (Command.open_settings), which are added with +."""
    try:
        compose_config(config, list(overrides))
    except (ConfigCompositionException, MissingConfigException, OverrideParseException) as err:
        return composition_problem(config, overrides, err, open_settings)
    except Exception:  # noqa: BLE001 - Hydra reports the rest in full
        return None
    return None


def composition_problem(config: str, overrides: Sequence[str], err: Exception,
                        open_settings: Collection[str] = ()) -> str | None:
    """One line for an error composing configs/<config>.yaml with `overrides`, or None where Hydra says it better: a
    key the config lacks names the settings its node holds, the one it may have meant and, for a node that builds a
    class, how to add an argument; an override Hydra cannot parse, that override; a missing config, the options Hydra
    lists below it."""
    if isinstance(err, OverrideParseException):  # its message does not name the override
        return f"{err.override}: Hydra cannot parse it ({first_line(err)}; https://hydra.cc/docs/1.3/advanced/" \
               "override_grammar/basic)"
    if isinstance(err, MissingConfigException):  # names the group and the option, and lists the options
        return first_line(err)
    key = missing_key(err)
    if key is None:
        return None  # Hydra's own settings: its report names the fix (+hydra.job.env_set.X=1)
    missing = [key]
    for _ in overrides:  # without the overrides of the missing keys, or of keys beneath them (optm.lr=1: optm)
        try:
            before = composed_without(config, overrides, missing)
            break
        except ConfigCompositionException as again:  # another key is missing too: each in turn
            more = missing_key(again)
            if more is None or more in missing:
                return None
            missing.append(more)
        except Exception:  # noqa: BLE001 - another override fails otherwise: Hydra's report
            return None
    else:
        return None
    also = f" (nor is there {', '.join(missing[1:])})" if len(missing) > 1 else ""
    holder, known = deepest_node(before, key)
    name = key[len(holder) + 1:] if holder else key
    meant = meant_among(name.split(".")[0], list(known))
    if not meant and any(under(key, node) for node in open_settings):
        return f"{key}: the config leaves it out, and its reader takes it where given: add it with +{key}=...{also}"
    where, guess = holder or "the top level", f"did you mean {' or '.join(meant)}? " if meant else ""
    own = [k for k in known if not k.startswith("_")]
    holds = f"{where} holds {', '.join(own)}" if own else f"{where} holds no setting of its own"
    if "_target_" in known and "." not in name:  # a node that builds a class: an argument it leaves out is added
        return (f"{key}: there is no such setting; {guess}{holds}, and an argument its class takes that the config "
                f"leaves out is added with +{where}.<argument>=...{also}")
    return f"{key}: there is no such setting; {guess}{holds}{also}"


def missing_key(err: Exception) -> str | None:
    """The key of a composition error for a key the config lacks (not one of Hydra's own), else None."""
    key = getattr(err.__cause__, "full_key", None)
    if not (isinstance(err.__cause__, MISSING_KEY) and key) or key == "hydra" or key.startswith("hydra."):
        return None
    return key


def first_line(err: Exception) -> str:
    """An error's first line, with the choices Hydra lists below it for a missing config ("Available options")."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    if not lines:
        return type(err).__name__
    options = [option for option in takewhile(lambda line: not line.startswith("Config search path"), lines[2:])
               if not option.startswith("_")] if len(lines) > 1 and lines[1].startswith("Available options") else []
    # (a file named _... is a base the options build on, not one to choose: task/_glue.yaml)
    return f"{lines[0]}; choose one of {', '.join(options)}" if options else lines[0]
