"""`armlm bench <name> [args]`: a script of bench/ run as `python bench/<name>.py [args]` runs it (bench/README.md),
through the same dispatch as every other command (common.commands)."""

from __future__ import annotations

import re
import sys

from common.commands import Command, dispatch
from common.config import REPO

BENCH = REPO / "bench"
RUNS_ALONE = re.compile(r"^def main\(", re.M)  # a script; the modules beside them (flops.py, ...) are what they share


def benchmarks() -> dict[str, Command]:
    """One command per script of bench/, its `main` reading sys.argv as the script's own `__main__` does."""
    return {p.stem: Command(p.stem, f"python bench/{p.name}", "bench/README.md", f"bench.{p.stem}:main",
                            script=f"bench/{p.name}")
            for p in sorted(BENCH.glob("*.py"))
            if RUNS_ALONE.search(p.read_text(encoding="utf-8"))}


def main() -> None:
    # bench/ is a folder of scripts beside the installed packages (pyproject.toml), importable from the checkout only
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    found = benchmarks()
    usage = "usage: armlm bench <name> [args]\n\nbenchmarks (bench/README.md):\n  " + "\n  ".join(found)
    dispatch(found, sys.argv[1:], "armlm bench", "benchmark", usage)
