"""What a fine-tuning config is refused on before the run starts: its numbers, its kernels and what it reads from.
`armlm finetune` runs check_config on the composed config before it imports the run's stack (Lightning and the model
sources, seconds), and a study runs it on one stage of each shape before any stage starts (studies.runner); the runs
(finetune.run, finetune.static) check again, for callers that start them directly."""

from __future__ import annotations

from omegaconf import DictConfig

from armlm.common.errors import ArmlmError
from armlm.training.setup import TRAINER_ARGUMENTS, check_run_arguments, refuse_fp16_on_a_cpu
from armlm.training.step_config import sdpa_backends
from armlm.training.validate import check_finetune_settings

# The Trainer's settings fine-tuning fixes (one validation per epoch, on whole dev splits; task.epochs the epochs), and
# the data module's arguments it sets itself (build(cfg.task.data, tokenizer_json=..., seed=...))
FIXED_TRAINER_SETTINGS = {"val_check_interval": 1.0, "check_val_every_n_epoch": 1, "num_sanity_val_steps": 0,
                          "limit_val_batches": 1.0}
DATA_ARGUMENTS = ("tokenizer_json", "seed")


def check_config(cfg: DictConfig) -> None:
    """The run's numbers (task.*, finetune.*), the SDPA kernels it names, and one source: a checkpoint (pretrained=)
    or, for a tagging task, static word vectors (vectors=). Reads no file: a study's checkpoint is not there yet."""
    check_finetune_settings(cfg)
    refuse_fp16_on_a_cpu(cfg.trainer)
    sdpa_backends(cfg.trainer)  # names torch knows
    check_run_arguments(cfg.task.data, DATA_ARGUMENTS, "task.data")  # +trainer.max_epochs=5: a study's launch too
    check_run_arguments(cfg.trainer, (*TRAINER_ARGUMENTS, "max_epochs", *FIXED_TRAINER_SETTINGS), "trainer")
    if cfg.get("vectors") and cfg.get("pretrained"):
        raise ArmlmError("give pretrained= (a checkpoint) or vectors= (static vectors), not both")
    if not cfg.get("vectors") and not cfg.get("pretrained"):
        raise ArmlmError(f"task={cfg.task.name} needs pretrained=<checkpoint file or pretraining run folder> (or, "
                         "for conll2003, vectors=<`armlm embeddings` run folder>)")


def unapplied_settings(cfg: DictConfig) -> dict[str, str]:
    """The settings a fine-tuning run of `cfg` does not apply (common.unapplied): a read-out position of the other
    kind of task, and the other mode's rates and feature settings; on static vectors (vectors=, finetune.static),
    everything a backbone would read (its head trains at task.optim.features_lr, with finetune.dropout)."""
    if cfg.get("vectors"):
        static = "vectors= tags with a head on static word vectors, without a backbone"
        return {key: static for key in ("finetune.mode", "finetune.attention", "finetune.pooling", "finetune.word_subword",
                                        "finetune.feature_layers", "finetune.features", "task.optim.lr",
                                        "task.optim.mix_lr")}
    task, settings = f"task={cfg.task.name}", cfg.finetune
    tags = cfg.task.kind == "tagging"
    if tags:
        unapplied = {"finetune.pooling": f"{task} tags words: it pools no sequence"}
    else:  # a classifier's head reads the last layer's pooled state, whatever the mode (finetune.module)
        whole = f"{task} labels whole inputs from the last layer's pooled state"
        unapplied = {"finetune.word_subword": whole, "finetune.feature_layers": whole, "finetune.features": whole}
    if settings.mode == "full":
        full = "finetune.mode=full trains the backbone and reads its last layer"
        unapplied = {"task.optim.features_lr": full, "finetune.feature_layers": full, "finetune.features": full,
                     **unapplied}
    else:
        unapplied["task.optim.lr"] = "finetune.mode=features trains the head alone, at task.optim.features_lr"
    if not (tags and settings.mode == "features" and settings.features == "scalar_mix"):
        unapplied["task.optim.mix_lr"] = "only finetune.mode=features finetune.features=scalar_mix mixes layers"
    else:  # ELMo's mix weighs every layer: no top layers to concatenate
        unapplied["finetune.feature_layers"] = "finetune.features=scalar_mix mixes every layer"
    return unapplied
