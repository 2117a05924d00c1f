"""What an export needs from an armlm checkpoint, pretraining or fine-tuned: the backbone, the LM head or the task
head, the tokenizer, and how the objective reads the backbone (asked of its class, never of its name)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from torch import Tensor

from armlm.common.errors import ArmlmError
from armlm.common.migrations import migrate_finetune_hparams
from armlm.models.backbone import ModelConfig
from armlm.models.checkpoint import hyperparameters, read_checkpoint, resolve_checkpoint
from armlm.objectives.base import refuse_unless_language_model
from armlm.sources import SOURCE_KEY
from armlm.training.callbacks import TokenAccounting
from armlm.training.pretrained import load_pretrained

HEAD_PREFIX = "head."
FINETUNED_BACKBONE_PREFIX = "backbone."


@dataclass
class ExportSource:
    checkpoint: Path
    model: dict[str, Any]  # models.backbone.ModelConfig fields
    weights: dict[str, Tensor]  # the backbone's state dict, armlm's names
    tokenizer_json: str
    objective: str  # the objective's class name
    reference: str  # the objective's paper (Objective.reference); empty for a fine-tuned checkpoint
    origin: str  # pretraining: the objective's _target_; fine-tuned: the pretraining checkpoint it started from
    architecture: str  # the transformers class: ArmlmForCausalLM | ArmlmForMaskedLM | ...ForSequence/TokenClassification
    attention: str  # how ArmlmModel and the task heads attend: "causal" or "bidirectional"
    lm_reader: str = "causal"  # Objective.left_to_right_reader, for ArmlmForCausalLM
    mask_in_support: bool = True
    lm_bias: Tensor | None = None  # pretraining checkpoints
    head: dict[str, Tensor] = field(default_factory=dict)  # fine-tuned: the task head's state dict (head.*)
    task: dict[str, Any] | None = None  # fine-tuned: name, kind, labels
    settings: dict[str, Any] | None = None  # fine-tuned: mode, attention, pooling, head_dropout, feature_layers
    trained_length: int | None = None
    commit: str | None = None  # the armlm commit the checkpoint was written with, where it was recorded
    babylm_backend: str | None = None  # Objective.babylm_backend (pretraining checkpoints)
    # pretraining: the input tokens this checkpoint's weights had seen (training.callbacks.TokenAccounting), which
    # tell a word milestone or an earlier checkpoint from the run's end, whose figures summary.json holds
    tokens_seen: int | None = None

    @property
    def finetuned(self) -> bool:
        return self.task is not None

    @property
    def is_causal_lm(self) -> bool:
        return self.architecture == "ArmlmForCausalLM"


def trained_positions(source: ExportSource) -> ExportSource:
    """`source` with only the positions its checkpoint was trained on (max_len and a learned position table cut to
    `trained_length`): the rows past it never received a gradient, and clients take their window from the
    exported `max_position_embeddings` / `n_positions` (lm-eval's `hf` backend read 512 where 64 were trained).
    A PLM's query stream reads one position past its last token, so it keeps one more."""
    if source.trained_length is None:
        return source
    keep = min(source.model["max_len"], source.trained_length + (source.lm_reader == "query_stream"))
    weights = dict(source.weights)
    if "position_embedding.weight" in weights:
        weights["position_embedding.weight"] = weights["position_embedding.weight"][:keep].clone()
    return replace(source, model={**source.model, "max_len": keep}, weights=weights)


def read_source(path: str | Path) -> ExportSource:
    """An ExportSource from a checkpoint file or a run folder (pretraining: checkpoints/last.ckpt)."""
    ckpt_path = resolve_checkpoint(path)
    ckpt = read_checkpoint(ckpt_path)
    hparams = hyperparameters(ckpt)
    if isinstance(hparams, dict) and "task" in hparams:
        return _finetuned(ckpt_path, ckpt, migrate_finetune_hparams(hparams))
    pretrained = load_pretrained(ckpt_path)
    cls = pretrained.objective_class
    # armlm's modelling file is a causal or a masked LM: an ElectraForPreTraining export is not written
    refuse_unless_language_model(cls, "export as a causal or masked LM (`armlm export`)")
    weights = dict(pretrained.weights)
    lm_bias = weights.pop("lm_bias")
    return ExportSource(
        checkpoint=ckpt_path, model=ModelConfig(**pretrained.model).to_dict(), weights=weights, tokenizer_json=pretrained.tokenizer_json,
        objective=cls.__name__, reference=cls.reference, origin=str(pretrained.objective["_target_"]),
        # A left-to-right model is a causal LM; one that gives each token's conditional given the rest, a masked LM.
        architecture="ArmlmForCausalLM" if cls.scoring == "chain_rule" else "ArmlmForMaskedLM",
        attention=cls.finetune_attention, lm_reader=cls.left_to_right_reader, mask_in_support=cls.mask_in_support,
        lm_bias=lm_bias, trained_length=pretrained.trained_length, commit=ckpt.get("armlm_commit"),
        babylm_backend=cls.babylm_backend,
        tokens_seen=TokenAccounting.saved_tokens(ckpt),
    )


def _finetuned(ckpt_path: Path, ckpt: dict[str, Any], hparams: dict[str, Any]) -> ExportSource:
    if "vectors" in hparams:
        raise ArmlmError(f"{ckpt_path} tags with static word vectors (train.py vectors=...): a table lookup and a linear "
                         "tagger, no Transformer for transformers to load; share the vectors folder's vectors.txt "
                         "(word2vec text format, gensim's KeyedVectors.load_word2vec_format) instead")
    if (hparams.get("settings") or {}).get("features") == "scalar_mix":
        raise ArmlmError(f"{ckpt_path} reads ELMo's learned mix of every layer (finetune.features=scalar_mix), which "
                         "armlm's modelling file does not implement; export a run fine-tuned with finetune.features=concat")
    if SOURCE_KEY in (hparams.get("model") or {}):
        raise ArmlmError(f"{ckpt_path} fine-tuned the transformers model {hparams['model'][SOURCE_KEY]}, which export "
                         "does not rewrite (it maps armlm backbones); share the fine-tuned checkpoint, or fine-tune with "
                         "transformers' own classes to get a transformers folder")
    missing = [k for k in ("model", "task", "settings") if k not in hparams]
    if missing or not ckpt.get("tokenizer_json"):
        raise ArmlmError(f"{ckpt_path} lacks {missing or ['tokenizer_json']}; export a checkpoint armlm's fine-tuning "
                         "wrote (outputs/<task>/<time>/checkpoints/*.ckpt)")
    state = ckpt["state_dict"]
    weights = {k[len(FINETUNED_BACKBONE_PREFIX):]: v for k, v in state.items() if k.startswith(FINETUNED_BACKBONE_PREFIX)}
    weights.pop("lm_bias", None)  # the LM head is not used by a task model
    task, settings = hparams["task"], hparams["settings"]
    tagging = task["kind"] == "tagging"
    pretrained = hparams.get("pretrained") or {}
    try:
        model = ModelConfig(**hparams["model"]).to_dict()
    except TypeError as err:
        raise ArmlmError(f"{ckpt_path}: model config {hparams['model']} is unknown to this version of armlm ({err}); "
                         "export with the armlm version that wrote the checkpoint") from err
    return ExportSource(
        checkpoint=ckpt_path, model=model, weights=weights, tokenizer_json=ckpt["tokenizer_json"],
        objective=str(pretrained.get("objective", "unknown")), reference="", origin=str(pretrained.get("checkpoint", "")),
        architecture="ArmlmForTokenClassification" if tagging else "ArmlmForSequenceClassification",
        attention=str(settings["attention"]),
        head={k: v for k, v in state.items() if k.startswith(HEAD_PREFIX)},
        task={"name": task["name"], "kind": task["kind"], "labels": list(task["labels"])}, settings=dict(settings),
        trained_length=pretrained.get("trained_length"), commit=ckpt.get("armlm_commit"),
    )

