"""The run folder a training or fine-tuning command writes into: `ckpt_path=last` resumes the run there, and a fresh
run never writes over another's checkpoints."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from armlm.common.errors import ArmlmError
from armlm.training.preflight import resumed_checkpoint


def resolve_last_checkpoint(cfg: DictConfig) -> None:
    """`ckpt_path=last` becomes the path it names (training.preflight.resumed_checkpoint)."""
    if cfg.get("ckpt_path") == "last":
        cfg.ckpt_path = str(resumed_checkpoint(cfg))


def refuse_writing_over_a_run(cfg: DictConfig, result_file: str | None = None) -> None:
    """A run that starts afresh (no ckpt_path) in a folder that holds another's checkpoints/last.ckpt, or its
    `result_file` (a study's unit restored from a record keeps its summary without checkpoints), would write over
    them: refused before any work, unless Lightning resumes there itself (under SLURM, from the hpc_ckpt_<n>.ckpt a
    requeue leaves in the run folder before it restarts the same command)."""
    out = Path(cfg.output_dir)
    if cfg.get("ckpt_path"):
        return
    if result_file and (out / result_file).is_file() and not (out / "checkpoints" / "last.ckpt").is_file():
        raise ArmlmError(f"{out} already holds {result_file}, an earlier run's result, which a fresh run there would "
                         "replace: give this run a folder of its own (hydra.run.dir=...), or delete that file first")
    if not (out / "checkpoints" / "last.ckpt").is_file():
        return
    # Lightning's import (seconds) only where the folder holds a run: `armlm train` checks the folder its command line
    # names before Hydra starts the job (common.commands.named_folder_problem), ahead of the config's own checks
    from lightning.pytorch.plugins.environments import SLURMEnvironment

    if SLURMEnvironment.detect() and any(out.glob("hpc_ckpt_*.ckpt")):
        return
    raise ArmlmError(f"{out} already holds a run (checkpoints/last.ckpt), which a fresh run there would write over: "
                     "resume it with ckpt_path=last, or give this run a folder of its own (hydra.run.dir=...)")
