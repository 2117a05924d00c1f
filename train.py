"""Pretrain the shared backbone with an objective, or fine-tune a checkpoint on a task: `armlm train` and
`armlm finetune` (docs/guides/pretraining.md, docs/guides/finetuning.md).

    python train.py objective=ar|mlm|... model=tiny|small|base seed=1 max_tokens=2_000_000
    python train.py task=rte pretrained=outputs/mlm/<time>     # fine-tuning, the same as `armlm finetune ...`
"""

import sys

from armlm.commands import main as armlm

FINETUNE = ("task=", "+task=")

if __name__ == "__main__":
    args = sys.argv[1:]
    armlm(["finetune" if any(a.startswith(FINETUNE) for a in args) else "train", *args])
