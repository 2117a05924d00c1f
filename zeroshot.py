"""Score a checkpoint zero-shot on BLiMP's minimal pairs by every method its objective has: `armlm zeroshot`
(docs/guides/zeroshot.md).

    python zeroshot.py checkpoint=outputs/mlm/<time>
"""

import sys

from armlm_cli.commands import main as armlm

if __name__ == "__main__":
    armlm(["zeroshot", *sys.argv[1:]])
