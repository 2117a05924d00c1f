"""`armlm report`'s kinds: each a command in common.commands' style ("module:function", dispatched as `armlm <command>`
is) whose function reads sys.argv as `armlm report <kind> ...`; `armlm report --help` lists them."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from armlm.common.commands import Command, dispatch

HEADER = ("`armlm report <kind> <folder> [...]`: rebuild a report from run or study folders, without running "
          "anything.")
REPORTS: dict[str, Command] = {c.name: c for c in (
    Command("study", "report.md, tables and figures of a study", "docs/guides/studies.md",
            "armlm.analysis.reports.study_report:main", args="<root>"),
    Command("findings", "the registered findings' verdicts", "docs/guides/studies.md",
            "armlm.analysis.reports.findings_report:main", args="<root>"),
    Command("blimp", "BLiMP by objective and method across studies", "docs/guides/zeroshot.md",
            "armlm.analysis.reports.blimp_report:main", args="<root> [<root>]"),
    Command("embeddings", "the embeddings study's tables", "docs/guides/studies.md",
            "armlm.analysis.reports.embeddings_report:main", args="<root>"),
    Command("curves", "each objective's measures against its budget in words", "docs/guides/studies.md",
            "armlm.analysis.reports.curves_report:main", args="<root>"),
    Command("milestones", "BLiMP at each BabyLM word milestone", "docs/guides/babylm.md",
            "armlm.analysis.reports.milestones_report:main", args="<root>"),
    Command("finetune", "fine-tuning runs over seeds beside the baseline", "docs/guides/finetuning.md",
            "armlm.analysis.reports.finetune_results:main", args="<folder>"),
)}


def usage() -> str:
    lines = [f"armlm report {c.name} {c.args}" for c in REPORTS.values()]
    width = max(map(len, lines)) + 3
    return "\n".join([HEADER, "", *(f"    {line:<{width}}{c.summary} ({c.run.partition(':')[0]})"
                                    for line, c in zip(lines, REPORTS.values(), strict=True)), ""])


def main() -> None:
    dispatch(REPORTS, sys.argv[1:], "armlm report", "report", usage())


def report_main(write: Callable[[Path], list[Path]], about: str | None) -> None:
    """The `main` of a report kind that reads one study folder: `armlm report <kind> <root>` writes it and lists the
    files written."""
    parser = argparse.ArgumentParser(description=about, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", type=Path, help="a study folder (`armlm study`'s root=)")
    print("\n".join(str(p) for p in write(parser.parse_args().root)))
