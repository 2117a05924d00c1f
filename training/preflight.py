"""What a pretraining config is refused on before the run starts: its settings, and the checkpoint it resumes. `armlm
train` runs check_config on the composed config before it imports the run's stack (Lightning, seconds), so a bad value
is one line at once, and a study runs it on one stage of each shape before any stage starts (studies.runner); the run
checks again, for callers that start it directly."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from armlm.common.errors import ArmlmError, ArmlmFileError
from armlm.datamodules.tokenizer import TokenizerSettings
from armlm.models.backbone import ModelConfig
from armlm.models.checkpoint import read_hyperparameters
from armlm.training.setup import (
    TRAINER_ARGUMENTS,
    build,
    build_model_config,
    check_run_arguments,
    differences,
    refuse_fp16_on_a_cpu,
)
from armlm.training.step_config import sdpa_backends
from armlm.training.validate import check_branch_settings, check_run_settings

# the data module's arguments the run sets itself (training.run: build(cfg.data, input_format=..., seed=...))
DATA_ARGUMENTS = ("input_format", "seed")


def check_config(cfg: DictConfig) -> tuple[Any, ModelConfig]:
    """Everything that can be checked without data, so bad settings fail before any data processing."""
    objective = build(cfg.objective)  # validates mask rates and probabilities
    model_config = build_model_config(cfg.model)  # validates sizes
    check_run_settings(cfg, needs_documents=objective.input_format == "segment_pairs")
    check_branch_settings(cfg, objective)
    refuse_fp16_on_a_cpu(cfg.trainer)
    sdpa_backends(cfg.trainer)  # names torch knows
    check_run_arguments(cfg.data, DATA_ARGUMENTS, "data")  # +data.seed=3: a study's launch refuses it too
    check_run_arguments(cfg.trainer, TRAINER_ARGUMENTS, "trainer")
    try:
        TokenizerSettings(**OmegaConf.to_container(cfg.data.tokenizer, resolve=True))  # types and sizes
    except TypeError as err:  # a key it does not take (+data.tokenizer.x=1)
        raise ArmlmError(f"data.tokenizer: {err}; drop the setting or name one of TokenizerSettings' fields") from None
    if cfg.data.block_size > model_config.max_len:
        raise ArmlmError(f"data.block_size={cfg.data.block_size} exceeds model.max_len={model_config.max_len}")
    if objective.needs_progress and cfg.get("max_flops") is not None:
        raise ArmlmError(f"{type(objective).__name__} follows the token budget (phases or a mask-rate schedule), "
                         "which a FLOPs budget does not fix in advance; give max_tokens=... instead of max_flops")
    resumed = resumed_checkpoint(cfg)
    if resumed is not None:
        check_resumable(resumed, model_config, OmegaConf.to_container(cfg.objective, resolve=True))
    return objective, model_config


def resumed_checkpoint(cfg: DictConfig) -> Path | None:
    """The checkpoint ckpt_path names: a file, or `last`, this run folder's checkpoints/last.ckpt (resume an
    interrupted run with its own command plus `hydra.run.dir=<its folder> ckpt_path=last`); None to start afresh."""
    given = cfg.get("ckpt_path")
    if not given:
        return None
    if given != "last":
        return Path(given)
    last = Path(cfg.output_dir) / "checkpoints" / "last.ckpt"
    if not last.is_file():
        raise ArmlmFileError(f"ckpt_path=last: {last} does not exist; give hydra.run.dir=<the interrupted run's folder> "
                             "(or ckpt_path=<its checkpoint file>)")
    return last


def check_resumable(ckpt_path: Path, model_config: ModelConfig, objective: dict[str, Any]) -> None:
    """A resumed run must have the checkpoint's model and objective; list every key that differs."""
    saved = read_hyperparameters(ckpt_path)
    if not isinstance(saved, dict) or not {"model", "objective"} <= saved.keys():
        raise ArmlmError(f"{ckpt_path} holds no armlm hyperparameters; resume only from checkpoints armlm wrote")
    ours = {"model": without_vocab(asdict(model_config)), "objective": objective}
    theirs = {"model": without_vocab(saved["model"]), "objective": saved["objective"]}
    differing = differences(ours, theirs)
    if differing:
        raise ArmlmError(f"{ckpt_path} does not match this run's config ({', '.join(differing)}); "
                         "resume with the same objective and model settings")


def without_vocab(model: dict[str, Any]) -> dict[str, Any]:
    """The vocabulary size comes from the data, not the config."""
    return {k: v for k, v in model.items() if k != "vocab_size"}


def unapplied_settings(cfg: DictConfig) -> dict[str, str]:
    """The settings a pretraining run of `cfg` does not apply (common.unapplied): the compiled step's, run eager."""
    if cfg.trainer.step.get("compile"):
        return {}
    eager = "trainer.step.compile is false, so the step runs eager"
    return {"trainer.step.compile_mode": eager, "trainer.step.compile_backend": eager}
