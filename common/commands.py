"""armlm's commands: one registry that the `armlm` console script, the top-level scripts and the study runner read.

    armlm train objective=mlm            armlm finetune task=rte pretrained=<run>      armlm --help

A command is either a Hydra command (a primary config in configs/ and the function that runs on the composed config)
or an argument-parser command (a function that reads sys.argv). Functions are named by import path, as Hydra's
`_target_` names classes, so listing the commands imports none of them: `armlm --help` and the study runner stay
light, and a command's heavy stack (torch, Lightning, gensim) loads only when that command runs.
"""

from __future__ import annotations

import importlib
import logging
import runpy
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from common.cli import CONFIG_ERRORS, run_or_exit
from common.config import CONFIGS, REPO
from common.errors import ArmlmError


@dataclass(frozen=True)
class Command:
    name: str
    summary: str  # one line for `armlm --help`
    guide: str  # the page that explains it, relative to the repository
    run: str  # "module:function": takes the composed config (Hydra) or reads sys.argv (config is None)
    config: str | None = None  # the primary config in configs/ of a Hydra command
    script: str | None = None  # the top-level script that runs it (DDP ranks and study stages are started by it)
    stage: str | None = None  # the kind of study stage it runs (studies.plan.Stage.kind)
    done_file: str | None = None  # what a finished run writes into its run folder (the study runner's "done")
    errors: tuple[str, ...] = ()  # further exception classes ("module:Class") reported as one line, not a traceback

    def function(self) -> Callable[..., Any]:
        return resolve(self.run)


COMMANDS: dict[str, Command] = {c.name: c for c in (
    Command("train", "pretrain the backbone with an objective (objective=ar|mlm|...)", "docs/guides/pretraining.md",
            "training.run:pretrain", "train", "train.py", "pretrain", "summary.json",
            ("builtins:ConnectionError", "training.lit_module:NonFiniteLossError", "builtins:FloatingPointError",
             "training.disk_full:DiskFullError")),
    Command("finetune", "fine-tune a checkpoint (or static vectors) on a GLUE task or CoNLL-2003",
            "docs/guides/finetuning.md", "finetune.command:finetune", "finetune", "train.py", "finetune", "results.json",
            ("builtins:ConnectionError", "builtins:FloatingPointError", "training.disk_full:DiskFullError")),
    Command("evaluate", "independence diagnostics and likelihoods of a checkpoint", "docs/guides/diagnostics.md",
            "diagnostics.run:run_diagnostics", "evaluate", "evaluate.py", "diagnose", "diagnostics.json"),
    Command("zeroshot", "score a checkpoint on BLiMP by every method its objective has", "docs/guides/zeroshot.md",
            "zeroshot.run:run_zeroshot", "zeroshot", "zeroshot.py", "zeroshot", "zeroshot.json"),
    Command("harness", "lm-evaluation-harness with armlm's model type (lm_eval's arguments)",
            "docs/guides/zeroshot.md", "zeroshot.harness_cli:main"),
    Command("embeddings", "static word vectors, or a checkpoint's type-level vectors, on word benchmarks",
            "docs/guides/embeddings.md", "embeddings.run:run_embeddings", "embeddings", "embeddings.py", "embed",
            "words.json"),
    Command("generate", "sample text from a checkpoint", "docs/guides/generation.md",
            "generation.run:run_generation", "generate", "generate.py"),
    Command("export", "export a checkpoint to a Hugging Face transformers folder", "docs/guides/export.md",
            "interchange.export:run_export", "export", "export.py", errors=("builtins:FileExistsError",)),
    Command("study", "arms x seeds: pretrain, fine-tune, diagnose, score; then the verdicts",
            "docs/guides/studies.md", "studies.run:study", "study", "study.py"),
    Command("report", "rebuild a report: armlm report study|findings|blimp|embeddings|finetune <folder> ...",
            "docs/guides/studies.md", "analysis.reports:main"),
    Command("bench", "print measured numbers: armlm bench <name> (bench/README.md lists them)", "bench/README.md",
            "common.commands:bench"),
)}


def resolve(path: str) -> Any:
    """The object an import path such as "training.run:pretrain" names."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


STAGE_COMMANDS: dict[str, Command] = {c.stage: c for c in COMMANDS.values() if c.stage}  # stage kind -> command


def stage_command(kind: str) -> Command:
    """The command that runs a study stage of this kind."""
    if kind not in STAGE_COMMANDS:
        raise ArmlmError(f"no command runs study stages of kind {kind!r}; the kinds are {list(STAGE_COMMANDS)}")
    return STAGE_COMMANDS[kind]


def run_hydra(cmd: Command) -> None:
    """Compose the command's config from sys.argv (Hydra's grammar, -m included) and run it; configuration and
    data errors end as one line naming the problem and the fix."""
    import hydra  # only a Hydra command pays for it

    errors = (*CONFIG_ERRORS, *(resolve(e) for e in cmd.errors))
    run, log = cmd.function(), logging.getLogger(f"armlm.{cmd.name}")

    @hydra.main(version_base="1.3", config_path=str(CONFIGS), config_name=cmd.config)
    def main(cfg: Any) -> None:
        run_or_exit(run, cfg, log, errors=errors)

    main()


def bench() -> None:
    """`armlm bench <name> [args]`: run bench/<name>.py as its own script would run."""
    names = sorted(p.stem for p in (REPO / "bench").glob("*.py") if not p.stem.startswith("_"))
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print("usage: armlm bench <name> [args]\n\nbenchmarks (bench/README.md):\n  " + "\n  ".join(names))
        return
    name = sys.argv[1]
    if name not in names:
        sys.exit(f"armlm bench: unknown benchmark {name!r}; choose one of {', '.join(names)}")
    sys.argv = [f"bench/{name}.py", *sys.argv[2:]]
    runpy.run_path(str(REPO / "bench" / f"{name}.py"), run_name="__main__")


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {c.name:<{width}}  {c.summary}  [{c.guide}]" for c in COMMANDS.values()]
    return "\n".join(["usage: armlm <command> [settings]   (armlm <command> --help for its settings)", "",
                      "commands:", *lines])


def main(argv: list[str] | None = None) -> None:
    """The `armlm` console script: `armlm <command> [its settings]`."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return
    if argv[0] not in COMMANDS:
        sys.exit(f"armlm: unknown command {argv[0]!r}; choose one of {', '.join(COMMANDS)} (armlm --help)")
    cmd = COMMANDS[argv[0]]
    # A Hydra command keeps its script as argv[0]: Lightning starts each DDP rank again from sys.argv.
    sys.argv = [str(REPO / cmd.script) if cmd.script else f"armlm {cmd.name}", *argv[1:]]
    if cmd.config is None:
        cmd.function()()
    else:
        run_hydra(cmd)


if __name__ == "__main__":
    main()
