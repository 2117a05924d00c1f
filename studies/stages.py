"""The kinds of study stage: what a stage of each kind runs, and which file in its run folder marks it done.

A stage runs one armlm command: its function ("module:function", as common.commands names them) on its primary
config, in a process of its own started from the command's top-level script (`python train.py <overrides>`, as
`armlm train` starts DDP ranks) or inside the study's (`launcher=in_process`). The console's registry
(armlm_cli.commands) takes these commands' function, config and script from here, so `armlm train ...` and a study's
pretraining stage run one thing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from common.commands import resolve
from common.errors import ArmlmError


@dataclass(frozen=True)
class StageKind:
    kind: str  # studies.plan.Stage.kind
    run: str  # "module:function" that runs on the composed config
    config: str  # the primary config in configs/
    script: str  # the top-level script a stage's process runs, relative to the repository
    done_file: str  # what a finished run writes into its run folder: the study runner's "done"
    resumes: bool = False  # a relaunch continues from the last checkpoint an earlier launch left (ckpt_path=)

    def function(self) -> Callable[..., Any]:
        return resolve(self.run)


STAGE_KINDS: dict[str, StageKind] = {k.kind: k for k in (
    StageKind("pretrain", "training.run:pretrain", "train", "train.py", "summary.json", resumes=True),
    StageKind("finetune", "finetune.command:finetune", "finetune", "train.py", "results.json", resumes=True),
    StageKind("diagnose", "diagnostics.run:run_diagnostics", "evaluate", "evaluate.py", "diagnostics.json"),
    StageKind("zeroshot", "zeroshot.run:run_zeroshot", "zeroshot", "zeroshot.py", "zeroshot.json"),
    StageKind("embed", "embeddings.run:run_embeddings", "embeddings", "embeddings.py", "words.json"),
)}


def stage_kind(kind: str) -> StageKind:
    """What a study stage of this kind runs."""
    if kind not in STAGE_KINDS:
        raise ArmlmError(f"no command runs study stages of kind {kind!r}; the kinds are {list(STAGE_KINDS)}")
    return STAGE_KINDS[kind]


def done_file(kind: str) -> str:
    """What a finished stage of this kind writes."""
    return stage_kind(kind).done_file
