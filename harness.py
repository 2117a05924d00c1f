"""lm-evaluation-harness with armlm's model type and tasks: `armlm harness` (docs/guides/zeroshot.md).

    python harness.py --model armlm --model_args checkpoint=outputs/mlm/<time>,method=pll --tasks blimp_local
"""

import sys

from armlm_cli.commands import main as armlm

if __name__ == "__main__":
    armlm(["harness", *sys.argv[1:]])
