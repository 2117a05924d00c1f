"""Turning a composed config into objects: instantiation with our own errors surfaced, CPU precision."""

from __future__ import annotations

import ctypes
import logging
import os
import sys
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from lightning.pytorch.plugins.environments import SLURMEnvironment
from omegaconf import DictConfig, OmegaConf

from armlm.common.errors import ArmlmError, ArmlmFileError
from armlm.common.machine import cpu_has_bf16_units
from armlm.models.backbone import ModelConfig

log = logging.getLogger("armlm.train")


def build(node: DictConfig, **kwargs: Any) -> Any:
    """hydra.utils.instantiate, but our own configuration errors surface as themselves (their messages
    name the key and the fix) instead of wrapped in Hydra's InstantiationException."""
    try:
        return instantiate(node, **kwargs)
    except InstantiationException as err:
        if isinstance(err.__cause__, (ValueError, FileNotFoundError)):
            raise err.__cause__ from None
        raise


def build_model_config(node: DictConfig) -> ModelConfig:
    """The `model` group's architecture (how a step runs is the trainer's: trainer.step)."""
    settings = OmegaConf.to_container(node, resolve=True)
    if "compile" in settings:
        raise ArmlmError("model.compile is now trainer.step.compile, which compiles the whole training step (not the "
                         "backbone alone): give trainer.step.compile=true, or trainer=gpu")
    return build(OmegaConf.create(settings))


def command_line_overrides() -> list[str]:
    """The overrides the running Hydra command was given ([] when the config was composed in process)."""
    return list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []


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


def differences(ours: dict[str, Any], theirs: dict[str, Any], prefix: str = "") -> list[str]:
    """'key: checkpoint X vs run Y' for every leaf setting that differs, nested dicts as dotted keys."""
    found = []
    for key in sorted(ours.keys() | theirs.keys()):
        mine, saved = ours.get(key), theirs.get(key)
        if isinstance(mine, dict) and isinstance(saved, dict):
            found += differences(mine, saved, f"{prefix}{key}.")
        elif mine != saved:
            found.append(f"{prefix}{key}: checkpoint {saved!r} vs run {mine!r}")
    return found


def choose_cpu_precision(cfg: DictConfig) -> None:
    """bf16 autocast on CPUs that have bf16 units; elsewhere it would be emulated and slow, so fp32."""
    if cfg.trainer.get("accelerator") == "cpu" and str(cfg.trainer.precision).startswith("bf16"):
        if not cpu_has_bf16_units():
            log.warning("this CPU has no bf16 matrix units (AVX512-BF16/AMX): training in fp32 instead")
            cfg.trainer.precision = "32-true"


def keep_large_allocations_on_the_heap() -> None:
    """Stop glibc from handing a training step's memory back to the OS, so the next step does not page-fault
    it in again (every fresh page is a fault and 4 KB of zeroing; a 16 MB block of logits is 4,096 faults).
    - M_MMAP_MAX = 0: large tensors come from the heap, not from fresh mmaps unmapped when freed (faster for
      dense-head models: docs/results/performance.md, "Figures moved out of code comments");
    - M_TRIM_THRESHOLD at its maximum: the heap's freed top is kept, not trimmed at 128 KB. Without it an AR
      step in bf16 still faulted most of its pages in again, and kept was faster in bf16 and fp32 alike (page
      faults and timings: docs/results/performance.md, "bf16 on the CPU", item 2; bench/README.md).
    The process's memory stays at its peak, which a training process reaches every step anyway. A setting the
    environment makes, as MALLOC_MMAP_MAX_ / MALLOC_TRIM_THRESHOLD_ or as glibc.malloc.mmap_max /
    glibc.malloc.trim_threshold in GLIBC_TUNABLES, wins. bench/throughput.py applies it to every model it times,
    as train.py does."""
    if not sys.platform.startswith("linux"):
        return
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return  # not glibc: nothing to tune
    # mallopt takes a C int: 2**31 - 1 is the largest threshold (a larger Python int would wrap to a small one).
    tunables = {item.split("=", 1)[0] for item in os.environ.get("GLIBC_TUNABLES", "").split(":") if "=" in item}
    for variable, tunable, option, value in (("MALLOC_MMAP_MAX_", "glibc.malloc.mmap_max", -4, 0),
                                             ("MALLOC_TRIM_THRESHOLD_", "glibc.malloc.trim_threshold", -1, 2**31 - 1)):
        if variable not in os.environ and tunable not in tunables:  # mallopt would override the user's choice
            mallopt(ctypes.c_int(option), ctypes.c_int(value))
