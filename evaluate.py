"""Measure what MLM's independence assumption costs, for a checkpoint: `armlm evaluate` (docs/guides/diagnostics.md).

    python evaluate.py checkpoint=outputs/mlm/<time> data=brown_enwiki pairs=200 candidates=50
"""

import sys

from armlm_cli.commands import main as armlm

if __name__ == "__main__":
    armlm(["evaluate", *sys.argv[1:]])
