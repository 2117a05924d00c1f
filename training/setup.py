"""Turning a composed config into objects: instantiation with our own errors surfaced, CPU precision. No Lightning:
a bench process builds an objective and a model from configs without its seconds of imports (the run folder's
checks, which ask Lightning about SLURM, are training.run_folder)."""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from armlm.common.devices import device_present
from armlm.common.errors import ArmlmError
from armlm.common.machine import cpu_has_bf16_units
from armlm.models.backbone import ModelConfig

log = logging.getLogger("armlm.train")


def build(node: DictConfig, *, node_name: str | None = None, adjusted: Mapping[str, Any] | None = None,
          **arguments: Any) -> Any:
    """hydra.utils.instantiate of `node` (named `node_name` where it is not part of a config) with the `arguments`
    the run gives its class itself, which the node must not hold (a key added there, +data.seed=3, would be
    overridden without a word: check_run_arguments), and `adjusted`, settings the node holds whose values the run
    derives from them (task.data.max_length, cut to the positions pretraining trained). Our own configuration errors
    surface as themselves (their messages name the key and the fix) instead of wrapped in Hydra's
    InstantiationException, and a setting the class does not take (one a class passes on with **kwargs, past
    common.added_settings' look at its signature) is one line naming the node."""
    where = node_name or node._get_full_key(None) or "the config"
    check_run_arguments(node, arguments, where)
    try:
        return instantiate(node, **arguments, **(adjusted or {}))
    except InstantiationException as err:
        if isinstance(err.__cause__, (ValueError, FileNotFoundError)):
            raise err.__cause__ from None
        if isinstance(err.__cause__, TypeError) and "unexpected keyword argument" in str(err.__cause__):
            raise ArmlmError(f"{where}: {err.__cause__}; drop that setting or correct its name") from None
        raise


# the Trainer's arguments every run sets itself (training.trainer.build_trainer): its run folder, callbacks, loggers
TRAINER_ARGUMENTS = ("default_root_dir", "callbacks", "logger", "plugins")


def check_run_arguments(node: DictConfig, arguments: Collection[str], where: str) -> None:
    """Raise ArmlmError where the config node holds one of the `arguments` the run gives its class itself."""
    given = [key for key in arguments if key in node]
    if given:
        raise ArmlmError(f"{where}.{given[0]}: the run sets {given[0]} itself, so this setting would change nothing; "
                         f"drop it")


def build_model_config(node: DictConfig) -> ModelConfig:
    """The `model` group's architecture (how a step runs is the trainer's: trainer.step)."""
    settings = OmegaConf.to_container(node, resolve=True)
    if "compile" in settings:
        raise ArmlmError("model.compile is now trainer.step.compile, which compiles the whole training step (not the "
                         "backbone alone): give trainer.step.compile=true, or trainer=gpu")
    return build(OmegaConf.create(settings), node_name=node._get_full_key(None) or "model")


def command_line_overrides() -> list[str]:
    """The overrides the running Hydra command was given ([] when the config was composed in process)."""
    return list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []


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


def runs_on_a_cpu(trainer: DictConfig) -> bool:
    """Whether Lightning's Trainer runs on the CPU: accelerator=cpu, or auto (its default) where torch sees no GPU."""
    accelerator = str(trainer.get("accelerator") or "auto")
    return accelerator == "cpu" or (accelerator == "auto" and not device_present("gpu"))


def refuse_fp16_on_a_cpu(trainer: DictConfig) -> None:
    """fp16 autocast on a CPU: Lightning runs it as bf16-mixed (with a warning), while the run's summary would record
    16-mixed. Refused by the commands' checks (a study's launch too) and again where a run sets its precision."""
    if runs_on_a_cpu(trainer) and str(trainer.precision) in ("16-mixed", "16"):
        raise ArmlmError(f"trainer.precision={trainer.precision}: fp16 autocast needs a GPU (on a CPU Lightning runs "
                         "bf16-mixed instead); give bf16-mixed (fp32 where the CPU has no bf16 units) or 32-true")


def choose_cpu_precision(cfg: DictConfig) -> None:
    """bf16 autocast on CPUs that have bf16 units; elsewhere it would be emulated and slow, so fp32."""
    refuse_fp16_on_a_cpu(cfg.trainer)
    if runs_on_a_cpu(cfg.trainer) and str(cfg.trainer.precision).startswith("bf16"):
        if not cpu_has_bf16_units():
            log.warning("this CPU has no bf16 matrix units (AVX512-BF16/AMX): training in fp32 instead")
            cfg.trainer.precision = "32-true"
