"""Settings given on the command line that the run they are given to does not apply, refused before it starts.

A setting the config holds is read by some runs and not others: `trainer.step.compile_mode` only by a compiled step,
`finetune.word_subword` only by a task that tags words, `blimp.context.tokens` only with a context file. Given to a
run that does not read it, it changed nothing and the run said nothing (`armlm finetune task=rte
finetune.word_subword=last` exited 0, its results recording word_subword: null). A command names, for its composed
config, the settings its run leaves alone and why (Command.unapplied); those the command line gives are refused in one
line. The config's own values are not: a default is not a request. A setting another one reads
through an interpolation (`contextual.min_count: ${method.min_count}`) is applied by that one.

Settings shared by several runs are not refused but named, one WARNING line each in the run that does not apply them:
a study gives its variants and shared settings (finetune_settings, extra_*) to every task, mode and arm, and a sweep
(-m, a bench's loop over tasks) its settings to every job, where some do not apply (the 2 x 2's word_subword=last on
the smoke scale's RTE); each run records the settings it applied. A sweep's job knows it is one (Hydra's MULTIRUN
mode), and a run started by a study or a bench finds SHARED_SETTINGS in its environment (a launch prefix that clears
the environment, srun --export=NONE, must pass it on); a study's launch check, which checks one stage of each shape
before any starts, leaves them to the stages (check_command's unapplied="skip"), and its in-process stages say them
as its stage processes do. A resumed run (ckpt_path=) is not refused either: it repeats the command it started with,
and its checkpoint holds those settings.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from omegaconf import DictConfig, OmegaConf

from armlm.common.added_settings import read_by_interpolation, strings, under
from armlm.common.errors import ArmlmError

log = logging.getLogger("armlm")

SHARED_SETTINGS = "ARMLM_SHARED_SETTINGS"  # set (to who shares them) where a study or a bench starts a run


def given_settings(overrides: Sequence[str]) -> dict[str, str]:
    """key -> value of the command line's settings and group choices (+, ++ and ~ stripped), Hydra's own left out."""
    given = {}
    for override in overrides:
        key, equals, value = override.lstrip("+~").partition("=")
        if equals and key != "hydra" and not key.startswith("hydra.") and "@" not in key:
            given[key] = value
    return given


def unapplied_given(unapplied: Mapping[str, str], overrides: Sequence[str], cfg: DictConfig) -> list[tuple[str, str]]:
    """("key=value", why) for each setting `overrides` give that falls under a key of `unapplied` (a node or one
    setting, mapped to why the run leaves it alone), unless an interpolation reads it."""
    if not unapplied:
        return []
    interpolations = " ".join(strings(OmegaConf.to_container(cfg, resolve=False)))
    found = []
    for key, value in given_settings(overrides).items():
        why = next((why for node, why in unapplied.items() if under(key, node)), None)
        if why is not None and not read_by_interpolation(key, interpolations):
            found.append((f"{key}={value}", why))
    return found


def refuse_unapplied_settings(unapplied: Mapping[str, str], overrides: Sequence[str], cfg: DictConfig,
                              shared: bool = False) -> None:
    """Raise ArmlmError for the first setting `overrides` give that this run does not apply; where several runs share
    the settings (`shared`), a WARNING line for each instead: another run may apply it, and none is silent."""
    found = unapplied_given(unapplied, overrides, cfg)
    if found and not shared:
        setting, why = found[0]
        raise ArmlmError(f"{setting}: {why}, so this setting would change nothing; drop it")
    for setting, why in found:
        log.warning("%s: %s, so this setting changes nothing in this run (a setting shared with other runs, which may "
                    "apply it)", setting, why)
