"""Export a checkpoint to a folder Hugging Face transformers loads offline: `armlm export` (docs/guides/export.md).

    python export.py checkpoint=outputs/ar/<time> out=exports/ar
"""

import sys

from armlm_cli.commands import main as armlm

if __name__ == "__main__":
    armlm(["export", *sys.argv[1:]])
