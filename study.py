"""Run a study (arms x seeds: pretrain, fine-tune, diagnose, score) and its verdicts: `armlm study`
(docs/guides/studies.md).

    python study.py study=ar_vs_mlm scale=smoke seeds=1
"""

import sys

from armlm_cli.commands import main as armlm

if __name__ == "__main__":
    armlm(["study", *sys.argv[1:]])
