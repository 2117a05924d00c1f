"""The mechanics of armlm's command registries: a command named by import path, and the dispatch of
`<prog> <name> [its arguments]` that `armlm` (armlm.commands), `armlm report` (analysis.reports.registry) and
`armlm bench` (armlm.benchmarks) share.

A command is either a Hydra command (a primary config in configs/ and the function that runs on the composed config)
or an argument-parser command (a function that reads sys.argv). Functions are named by import path, as Hydra's
`_target_` names classes, so listing a registry imports none of them: `armlm --help` stays light, and a command's
heavy stack (torch, Lightning, gensim) loads only when that command runs. The registries themselves sit on the floor
of what they name, or above it (tests/test_layers.py reads these strings as imports): this module names nothing.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode

from armlm.common.added_settings import check_added_settings
from armlm.common.cli import CONFIG_ERRORS, lightning_through_the_root, run_or_exit, wants_traceback
from armlm.common.composition import why_it_does_not_compose
from armlm.common.config import CHECKOUT, CONFIGS, compose_config, export_data_dir
from armlm.common.errors import ArmlmError
from armlm.common.unapplied import SHARED_SETTINGS, refuse_unapplied_settings

HELP = ("-h", "--help", "help")


@dataclass(frozen=True)
class Command:
    name: str
    summary: str  # one line for its registry's listing
    guide: str  # the page that explains it, relative to the repository
    run: str  # "module:function": takes the composed config (Hydra) or reads sys.argv (config is None)
    config: str | None = None  # the primary config in configs/ of a Hydra command
    # the checkout's script that runs it alone (train.py): argv[0] while it runs from a checkout, so that Lightning,
    # which starts each DDP rank again from sys.argv, starts `python train.py ...`
    script: str | None = None
    args: str = ""  # what follows its name on its usage line (`armlm report blimp <root> [<root>]`)
    errors: tuple[str, ...] = ()  # further exception classes ("module:Class") reported as one line, not a traceback
    # "module:function" that checks the composed config without the run's heavy stack (Lightning, transformers), run
    # before `run` is imported: a bad value is one line in the seconds Hydra and torch take
    check: str | None = None
    # nodes whose readers take keys the config leaves out, and check them (a study's optional settings): a key added
    # anywhere else must be one its node holds or its class takes (common.added_settings)
    open_settings: tuple[str, ...] = ()
    # "module:function" naming the settings a run of a composed config does not apply, {key: why}: given on the command
    # line, each is refused (common.unapplied)
    unapplied: str | None = None
    # the file a finished run leaves in its run folder (diagnostics.json), which a run into that folder would replace
    result_file: str | None = None
    # "module:function" refusing a run folder that a run would write over, given the composed config (its output_dir
    # set) and result_file: a command whose runs resume, whose folder holds more than its result
    folder_check: str | None = None

    def function(self) -> Callable[..., Any]:
        return resolve(self.run)


def resolve(path: str) -> Any:
    """The object an import path such as "training.run:pretrain" names."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def run_hydra(cmd: Command) -> None:
    """Compose the command's config from sys.argv (Hydra's grammar, -m included), check it (Command.check) and run
    it; a misspelt key or option ends in one line (common.composition) before Hydra's own report of it. The command's
    module is imported once the config has composed and passed its check: a misspelt option or group, or a value out
    of range, is refused in the seconds Hydra (and torch) take, not after the seconds Lightning's import takes, and
    --help and --cfg print without it. A module that fails to import now fails inside Hydra's job (its "Error
    executing job" lines, the run folder made)."""
    import hydra  # only a Hydra command pays for it

    log = logging.getLogger(f"armlm.{cmd.name}")
    export_data_dir()
    overrides = sys.argv[1:]
    # one line, not Hydra's five; Hydra's flags (-m's sweeps, --cfg) and hydra.mode=MULTIRUN compose their own way,
    # and ARMLM_TRACEBACK=1 leaves the report to Hydra (HYDRA_FULL_ERROR=1 for its traceback)
    sweep = any(arg.startswith("-") or arg.replace(" ", "") == "hydra.mode=MULTIRUN" for arg in overrides)
    problem = None if wants_traceback() or sweep else why_it_does_not_compose(str(cmd.config), overrides,
                                                                              cmd.open_settings)
    if problem is None and not sweep:
        problem = named_folder_problem(cmd, overrides)
    if problem is not None:
        logging.basicConfig(format="[%(asctime)s][%(name)s][%(levelname)s] - %(message)s")  # as Hydra's own lines
        log.error("ArmlmError: %s", problem)
        sys.exit(1)

    @hydra.main(version_base="1.3", config_path=str(CONFIGS), config_name=cmd.config)
    def main(cfg: Any) -> None:
        unapplied = "warn" if HydraConfig.get().mode == RunMode.MULTIRUN else "refuse"  # a sweep's go to every job
        run_or_exit(lambda composed: check_command(cmd, composed, command_line(), unapplied), cfg, log)
        run = cmd.function()
        if "lightning" in sys.modules:  # imported after Hydra configured logging: one route for its messages
            lightning_through_the_root()
        run_or_exit(run, cfg, log, errors=error_types(cmd))

    main()


def named_folder_problem(cmd: Command, overrides: Sequence[str]) -> str | None:
    """Why a run into a folder the command line names (hydra.run.dir=..., or output_dir=...) would write over an
    earlier run's result (Command.result_file, Command.folder_check), or None. Checked before Hydra starts the job,
    which writes its record of the run (.hydra/config.yaml, read by branches, exports and item tables) into its folder
    first: a run refused inside the job had already replaced the earlier run's record with its own. A folder Hydra
    names itself is new (its time, to the second); one it resolves (${...}) is left to the job."""
    named = {key: value for key, value in (o.lstrip("+").split("=", 1) for o in overrides if "=" in o)
             if key in ("hydra.run.dir", "output_dir")}
    folders = [Path(value) for value in named.values() if "${" not in value and Path(value).is_dir()]
    if not folders:
        return None
    if cmd.folder_check is None:
        held = [folder for folder in folders if cmd.result_file and (folder / cmd.result_file).is_file()]
        return (f"{held[0]} already holds {cmd.result_file}, an earlier run's result, which this run would replace: "
                "give this run a folder of its own (hydra.run.dir=...), or delete that file first") if held else None
    # its settings as its job composes them: a search path's too (hydra.searchpath=, as command_line keeps it)
    try:
        cfg = compose_config(str(cmd.config), [o for o in overrides
                                               if not o.lstrip("+").startswith("hydra.") or "searchpath=" in o])
    except Exception:  # noqa: BLE001 - a command line that does not compose is Hydra's to report
        return None
    for folder in folders:
        cfg.output_dir = str(folder)
        try:
            resolve(cmd.folder_check)(cfg, cmd.result_file)
        except ArmlmError as err:
            return str(err)
    return None


def command_line() -> list[str]:
    """The running Hydra job's overrides, with the search path it composed with (Hydra keeps hydra.* apart): what
    composes its config again."""
    overrides = HydraConfig.get().overrides
    return [*(o for o in overrides.hydra if o.startswith("hydra.searchpath=")), *overrides.task]


class Checked(Protocol):
    """What a command (Command, or a study's StageKind) refuses a config for: its check, on its config's composition."""
    check: str | None
    config: str | None
    open_settings: tuple[str, ...]
    unapplied: str | None


UNAPPLIED = ("refuse", "warn", "skip")  # what check_command does with a setting given that the run does not apply


def check_command(cmd: Checked, cfg: Any, overrides: Sequence[str], unapplied: str = "refuse") -> None:
    """What the command refuses its composed config for before it runs: its own check (Command.check), a setting the
    overrides add that nothing would read (common.added_settings), then one they give that this run does not apply
    (Command.unapplied, common.unapplied): `unapplied` "warn" where several runs share the settings (a sweep's job;
    "refuse" warns too in a run whose environment says so), "skip" for a study's launch check (its stages warn, each
    in its own run); a resumed run (ckpt_path=) repeats its command and is not checked for them."""
    if unapplied not in UNAPPLIED:
        raise ValueError(f"unapplied={unapplied!r}; one of {UNAPPLIED}")
    if cmd.check is not None:
        resolve(cmd.check)(cfg)
    check_added_settings(str(cmd.config), overrides, cfg, cmd.open_settings)
    if unapplied != "skip":
        check_unapplied(cmd, cfg, overrides, shared=unapplied == "warn")


def check_unapplied(cmd: Checked, cfg: Any, overrides: Sequence[str], shared: bool) -> None:
    """The settings `overrides` give that a run of `cfg` does not apply (Command.unapplied): refused, or where several
    runs share them (`shared`, or a run whose environment says so) named in a WARNING line each; a resumed run
    (ckpt_path=) repeats its command and is not checked for them."""
    if cmd.unapplied is not None and not cfg.get("ckpt_path"):
        refuse_unapplied_settings(resolve(cmd.unapplied)(cfg), overrides, cfg,
                                  shared=shared or bool(os.environ.get(SHARED_SETTINGS)))


def error_types(cmd: Command) -> tuple[type[BaseException], ...]:
    """What ends a command as one line naming the problem and the fix (common.cli): a user error, and its own."""
    return (*CONFIG_ERRORS, *(resolve(e) for e in cmd.errors))


def script_path(script: str | None) -> str | None:
    """A command's script in the checkout (Command.script, StageKind.script), where there is a checkout and a script."""
    if script is None or CHECKOUT is None or not (CHECKOUT / script).is_file():
        return None
    return str(CHECKOUT / script)


# Lightning starts ranks 1.. of a DDP run again as `python -m armlm.__main__ <settings>` (under `python -m armlm`) or
# `python <sys.argv[0]> <settings>`: the command's name is not among the settings, so a command that trains (one with
# a script) leaves "<its pid>:<its name>" here, in the environment those ranks inherit, and a rank that this process
# started itself (LOCAL_RANK > 0, its parent's pid) reads it back. No other descendant does.
RANK_COMMAND = "ARMLM_RANK_COMMAND"


def dispatch(commands: Mapping[str, Command], argv: list[str], prog: str, noun: str, usage: str) -> None:
    """`<prog> <name> [its arguments]`: the named command runs on sys.argv as it would alone, a user error ending as
    one line either way; no name, or -h, --help or help, prints `usage`; an unknown name ends naming the choices.
    argv[0] is the command's script in a checkout (an argument-parser command's usage line names it), else, for a
    Hydra command, the file this process was started from (the `armlm` console script), what Lightning starts a
    further rank from (rank_argv), else "<prog> <name>"."""
    argv = rank_argv(commands, argv)
    if not argv or argv[0] in HELP:
        print(usage)
        return
    if argv[0] not in commands:
        sys.exit(f"{prog}: unknown {noun} {argv[0]!r}; choose one of {', '.join(commands)} ({prog} --help)")
    cmd = commands[argv[0]]
    if cmd.config is None:
        sys.argv = [script_path(cmd.script) or f"{prog} {cmd.name}", *argv[1:]]
        run_or_exit(lambda _: cmd.function()(), None, logging.getLogger(f"armlm.{cmd.name}"), errors=error_types(cmd))
    else:
        started_from = sys.argv[0] if sys.argv and os.path.isfile(sys.argv[0]) else None
        sys.argv = [script_path(cmd.script) or started_from or f"{prog} {cmd.name}", *argv[1:]]
        if cmd.script is not None:  # a study or a sweep is never a DDP program (docs/guides/studies.md)
            os.environ[RANK_COMMAND] = f"{os.getpid()}:{cmd.name}"
        run_hydra(cmd)


def rank_argv(commands: Mapping[str, Command], argv: list[str]) -> list[str]:
    """A rank that Lightning started again (RANK_COMMAND) gets its command's name back in front of its settings."""
    parent, _, named = os.environ.get(RANK_COMMAND, "").partition(":")
    relaunched = os.environ.get("LOCAL_RANK", "0") not in ("", "0") and parent == str(os.getppid())
    if relaunched and named in commands and not (argv and (argv[0] in commands or argv[0] in HELP)):
        return [named, *argv]
    return argv
