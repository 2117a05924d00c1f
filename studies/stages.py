"""The kinds of study stage: what a stage of each kind runs, and which file in its run folder marks it done.

A stage runs one armlm command: its function ("module:function", as common.commands names them) on its primary
config, in a process of its own (`python -m armlm <command> <overrides>`; from a checkout, a command with a script runs
it, `python train.py <overrides>`, as Lightning starts DDP ranks) or inside the study's (`launcher=in_process`). The
console's registry (armlm.commands) takes these commands' name, function, config and script from here, so
`armlm train ...` and a study's pretraining stage run one thing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from armlm.common.commands import resolve
from armlm.common.errors import ArmlmError


@dataclass(frozen=True)
class StageKind:
    kind: str  # studies.plan.Stage.kind
    run: str  # "module:function" that runs on the composed config
    config: str  # the primary config in configs/
    command: str  # the `armlm <command>` a stage's process runs
    done_file: str  # what a finished run writes into its run folder: the study runner's "done"
    resumes: bool = False  # a relaunch continues from the last checkpoint an earlier launch left (ckpt_path=)
    script: str | None = None  # the checkout's script that runs the command alone (common.commands.Command.script)
    # "module:function" saying how many processes a run of a composed config is (DDP's ranks); None: always one
    world_size: str | None = None
    check: str | None = None  # "module:function" checking a composed config without the run's stack (Command.check)
    open_settings: tuple[str, ...] = ()  # nodes whose readers take keys the config leaves out (Command.open_settings)
    # "module:function" refusing a run folder a fresh run would write over (Command.folder_check); None: the command
    # refuses a folder that holds its done file
    folder_check: str | None = None
    unapplied: str | None = None  # "module:function": the settings a run of a config does not apply (Command.unapplied)

    def function(self) -> Callable[..., Any]:
        return resolve(self.run)

    def processes(self, cfg: Any) -> int:
        """How many processes the command's run of this composed config is."""
        return resolve(self.world_size)(cfg) if self.world_size else 1


WRITES_OVER_A_RUN = "armlm.training.run_folder:refuse_writing_over_a_run"  # a run folder's checkpoints (ckpt_path resumes)
STAGE_KINDS: dict[str, StageKind] = {k.kind: k for k in (
    StageKind("pretrain", "armlm.training.run:pretrain", "train", "train", "summary.json", resumes=True,
              script="train.py", world_size="armlm.training.devices:world_size",
              check="armlm.training.preflight:check_config", folder_check=WRITES_OVER_A_RUN,
              unapplied="armlm.training.preflight:unapplied_settings"),
    StageKind("finetune", "armlm.finetune.command:finetune", "finetune", "finetune", "results.json", resumes=True,
              script="train.py", world_size="armlm.training.devices:world_size",
              check="armlm.finetune.preflight:check_config", open_settings=("task.metrics",),
              folder_check=WRITES_OVER_A_RUN, unapplied="armlm.finetune.preflight:unapplied_settings"),
    StageKind("diagnose", "armlm.diagnostics.run:run_diagnostics", "evaluate", "evaluate", "diagnostics.json"),
    StageKind("zeroshot", "armlm.zeroshot.run:run_zeroshot", "zeroshot", "zeroshot", "zeroshot.json",
              unapplied="armlm.zeroshot.run:unapplied_settings"),
    StageKind("embed", "armlm.embeddings.run:run_embeddings", "embeddings", "embeddings", "words.json",
              unapplied="armlm.embeddings.run:unapplied_settings"),
)}


def stage_kind(kind: str) -> StageKind:
    """What a study stage of this kind runs."""
    if kind not in STAGE_KINDS:
        raise ArmlmError(f"no command runs study stages of kind {kind!r}; the kinds are {list(STAGE_KINDS)}")
    return STAGE_KINDS[kind]


def done_file(kind: str) -> str:
    """What a finished stage of this kind writes."""
    return stage_kind(kind).done_file
