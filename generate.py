"""Sample text from a pretraining checkpoint: `armlm generate` (docs/guides/generation.md).

    python generate.py checkpoint=outputs/ar/<time> prompt="The river" new_tokens=24 samples=3
"""

import sys

from armlm_cli.commands import main as armlm

if __name__ == "__main__":
    armlm(["generate", *sys.argv[1:]])
