"""armlm's commands: the registry that the `armlm` console script, `python -m armlm` and train.py read.

    armlm train objective=mlm            armlm finetune task=rte pretrained=<run>      armlm --help

Each command is named by import path (common.commands: the mechanics and the dispatch), so listing them imports none.
A command that runs study stages takes its function, config and script from the study runner's table
(studies.stages), so `armlm train ...` runs what a study's pretraining stage runs.
"""

from __future__ import annotations

import sys
from typing import Any

from armlm.common.commands import Command, dispatch
from armlm.studies.stages import STAGE_KINDS


def runs_stages(kind: str) -> dict[str, Any]:
    """The name, run function, config, script, check and open settings of the command that runs study stages of this
    kind, and what it refuses to write over: its done file, and its run folder's checkpoints (a run that resumes)."""
    stage = STAGE_KINDS[kind]
    return {"name": stage.command, "run": stage.run, "config": stage.config, "script": stage.script,
            "check": stage.check, "open_settings": stage.open_settings, "folder_check": stage.folder_check,
            "unapplied": stage.unapplied,
            "result_file": stage.done_file}


COMMANDS: dict[str, Command] = {c.name: c for c in (
    Command(summary="pretrain the backbone with an objective (objective=ar|mlm|...)", guide="docs/guides/pretraining.md",
            **runs_stages("pretrain"),
            errors=("builtins:ConnectionError", "armlm.training.nonfinite:NonFiniteLossError", "builtins:FloatingPointError",
                    "armlm.training.disk_full:DiskFullError")),
    Command(summary="fine-tune a checkpoint (or static vectors) on a GLUE task or CoNLL-2003",
            guide="docs/guides/finetuning.md", **runs_stages("finetune"),
            errors=("builtins:ConnectionError", "armlm.training.nonfinite:NonFiniteLossError", "builtins:FloatingPointError",
                    "armlm.training.disk_full:DiskFullError")),
    Command(summary="independence diagnostics and likelihoods of a checkpoint", guide="docs/guides/diagnostics.md",
            **runs_stages("diagnose")),
    Command(summary="score a checkpoint on BLiMP by every method its objective has", guide="docs/guides/zeroshot.md",
            **runs_stages("zeroshot")),
    Command("harness", "lm-evaluation-harness with armlm's model type (lm_eval's arguments)",
            "docs/guides/zeroshot.md", "armlm.zeroshot.harness_cli:main"),
    Command(summary="static word vectors, or a checkpoint's type-level vectors, on word benchmarks",
            guide="docs/guides/embeddings.md", **runs_stages("embed")),
    Command("generate", "sample text from a checkpoint", "docs/guides/generation.md",
            "armlm.generation.run:run_generation", "generate", result_file="samples.json"),
    Command("export", "export a checkpoint to a Hugging Face transformers folder", "docs/guides/export.md",
            "armlm.interchange.export:run_export", "export", errors=("builtins:FileExistsError",),
            check="armlm.interchange.preflight:check_config"),
    Command("study", "arms x seeds: pretrain, fine-tune, diagnose, score; then the verdicts",
            "docs/guides/studies.md", "armlm.studies.run:study", "study",
            open_settings=("study",),  # a study's planner reads its optional settings where given (study.gate, ...)
            unapplied="armlm.studies.run:unapplied_settings"),
    Command("report", "rebuild a report: armlm report study|findings|blimp|embeddings|finetune <folder> ...",
            "docs/guides/studies.md", "armlm.analysis.reports.registry:main"),
    Command("bench", "print measured numbers: armlm bench <name> (bench/README.md lists them)", "bench/README.md",
            "armlm.benchmarks:main"),
)}


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {c.name:<{width}}  {c.summary}  [{c.guide}]" for c in COMMANDS.values()]
    return "\n".join(["usage: armlm <command> [settings]   (armlm <command> --help for its settings)", "",
                      "commands:", *lines])


def main(argv: list[str] | None = None) -> None:
    """The `armlm` console script: `armlm <command> [its settings]`."""
    dispatch(COMMANDS, sys.argv[1:] if argv is None else list(argv), "armlm", "command", usage())


if __name__ == "__main__":
    main()
