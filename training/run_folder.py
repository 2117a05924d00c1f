"""The run folder a training or fine-tuning command writes into: `ckpt_path=last` resumes the run there, and a fresh
run never writes over another's checkpoints."""

from __future__ import annotations

from pathlib import Path

from lightning.pytorch.plugins.environments import SLURMEnvironment
from omegaconf import DictConfig

from armlm.common.errors import ArmlmError, ArmlmFileError


def resolve_last_checkpoint(cfg: DictConfig) -> None:
    """`ckpt_path=last` means this run folder's checkpoints/last.ckpt: resume an interrupted run with its own
    command plus `hydra.run.dir=<its folder> ckpt_path=last`."""
    if cfg.get("ckpt_path") == "last":
        last = Path(cfg.output_dir) / "checkpoints" / "last.ckpt"
        if not last.is_file():
            raise ArmlmFileError(f"ckpt_path=last: {last} does not exist; give hydra.run.dir=<the interrupted "
                                    "run's folder> (or ckpt_path=<its checkpoint file>)")
        cfg.ckpt_path = str(last)


def refuse_writing_over_a_run(cfg: DictConfig) -> None:
    """A run that starts afresh (no ckpt_path) in a folder that holds another's checkpoints/last.ckpt would write over
    its checkpoints and summary: refused before any work, unless Lightning resumes there itself (under SLURM, from
    the hpc_ckpt_<n>.ckpt a requeue leaves in the run folder before it restarts the same command)."""
    out = Path(cfg.output_dir)
    requeued = SLURMEnvironment.detect() and any(out.glob("hpc_ckpt_*.ckpt"))
    if cfg.get("ckpt_path") or not (out / "checkpoints" / "last.ckpt").is_file() or requeued:
        return
    raise ArmlmError(f"{out} already holds a run (checkpoints/last.ckpt), which a fresh run there would write over: "
                     "resume it with ckpt_path=last, or give this run a folder of its own (hydra.run.dir=...)")
