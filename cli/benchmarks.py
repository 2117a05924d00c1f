"""`armlm bench <name> [args]`: a script of bench/ run as `python bench/<name>.py [args]` runs it (bench/README.md),
through the same dispatch as every other command (common.commands). bench/ is a folder of scripts in the checkout, not
part of the installed package: an armlm installed from a wheel says so."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from armlm.common.commands import Command, dispatch
from armlm.common.config import CHECKOUT
from armlm.common.errors import ArmlmError

RUNS_ALONE = re.compile(r"^def main\(", re.M)  # a script; the modules beside them (flops.py, ...) are what they share


def bench_folder() -> Path:
    """The checkout's bench/; an installed wheel has none."""
    if CHECKOUT is None:
        raise ArmlmError("bench/ runs from a checkout of armlm, not an installed wheel: clone the repository, "
                         "`pip install -e .` there, and run `armlm bench <name>` or `python bench/<name>.py`")
    return CHECKOUT / "bench"


def benchmarks() -> dict[str, Command]:
    """One command per script of bench/, its `main` reading sys.argv as the script's own `__main__` does."""
    return {p.stem: Command(p.stem, f"python bench/{p.name}", "bench/README.md", f"bench.{p.stem}:main",
                            script=f"bench/{p.name}")
            for p in sorted(bench_folder().glob("*.py"))
            if RUNS_ALONE.search(p.read_text(encoding="utf-8"))}


def main() -> None:
    found = benchmarks()
    # the scripts import what they share as bench.<module>, from the checkout (as `python bench/<name>.py` does)
    if str(CHECKOUT) not in sys.path:
        sys.path.insert(0, str(CHECKOUT))
    usage = "usage: armlm bench <name> [args]\n\nbenchmarks (bench/README.md):\n  " + "\n  ".join(found)
    dispatch(found, sys.argv[1:], "armlm bench", "benchmark", usage)
