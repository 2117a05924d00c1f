"""A study's arms, typed: each planner reads its own kind of arm, a frozen dataclass whose fields are its grammar (a
key that is no field is refused, naming the fields) and whose annotations are checked as the arm is parsed. Values
stay as written (an `epochs: 2` stays the int 2), so the overrides a stage records do not change with the parsing."""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, TypeVar

from armlm.common.errors import ArmlmError


@dataclass(frozen=True)
class PipelineArm:
    """An arm of a pipeline study (studies.plan): one source of its model, then what its stages do with it."""

    pretrain: tuple[str, ...] | None = None  # train.py overrides: the arm pretrains
    from_arm: str | None = None  # or: it fine-tunes that pretraining arm's checkpoint (at checkpoint_fraction)
    model: str | None = None  # or: it reads a published model as it is (a Hugging Face folder, hf:<id>[@rev], a run)
    checkpoint_fraction: float | None = None  # with from_arm: the share of that arm's budget its checkpoint is read at
    finetune: tuple[str, ...] | None = None  # fine-tuning variants (study.finetune_variants); None: default_variants
    budget_scale: float | None = None  # times the study's budget (1 when not given)
    # or passes over the first unique_tokens tokens of the train split (the arm's, else the study's): a
    # data-constrained run; with neither, over the whole split
    epochs: float | None = None
    unique_tokens: int | None = None
    branch_of: str | None = None  # an earlier arm with more epochs whose run this one branches off (studies.branches)
    diagnose: bool | None = None  # None: true, unless it reads another arm's checkpoint
    diagnose_settings: tuple[str, ...] | None = None  # `armlm evaluate` overrides of its own, last
    zeroshot: bool | None = None  # in a study with a `zeroshot:` section; None: the pretraining arms
    zeroshot_settings: tuple[str, ...] | None = None  # `armlm zeroshot` overrides of its own, after the study's
    trust_remote_code: bool | None = None  # a published folder that ships its own modelling file

    def given(self, key: str) -> bool:
        """Whether the arm's config set `key` (a planner's defaults depend on what was left out)."""
        return getattr(self, key) is not None


@dataclass(frozen=True)
class EmbeddingsArm:
    """An arm of the embeddings study (studies.embeddings_plan): a static method, or another study's checkpoint."""

    method: str | None = None  # configs/method/: static vectors trained per seed
    checkpoint_arm: str | None = None  # or: that arm of the study in checkpoints_from, read as it is
    finetune: tuple[str, ...] | None = None  # NER variants on what it gives
    gate: bool | None = None  # false: an arm with no likelihood, which the learning gate cannot read

    def given(self, key: str) -> bool:
        return getattr(self, key) is not None


Arm = TypeVar("Arm", PipelineArm, EmbeddingsArm)


def _fits(value: Any, annotation: Any) -> bool:
    """Whether a config value is of a field's annotated type (str, bool, int, float, tuple[str, ...], or None)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return any(_fits(value, option) for option in typing.get_args(annotation))
    if annotation is type(None):
        return value is None
    if typing.get_origin(annotation) is tuple:
        return isinstance(value, list | tuple) and all(isinstance(v, str) for v in value)
    if annotation is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, annotation)


def parse_arm(kind: type[Arm], name: str, raw: Mapping[str, Any]) -> Arm:
    """One arm of a study config (plain data: OmegaConf.to_container) as its planner's type."""
    hints = typing.get_type_hints(kind)
    names = [f.name for f in fields(kind)]
    unknown = sorted(set(raw) - set(names))
    if unknown:
        raise ArmlmError(f"arm {name}: unknown keys {unknown}; an arm takes {names} ({kind.__name__}, studies/arms.py)")
    for key, value in raw.items():
        if not _fits(value, hints[key]):
            raise ArmlmError(f"arm {name}: {key}={value!r} is not a {hints[key]}")
    return kind(**{k: tuple(v) if isinstance(v, list) else v for k, v in raw.items()})


def parse_arms(kind: type[Arm], arms: Mapping[str, Mapping[str, Any]]) -> dict[str, Arm]:
    """Every arm of a study, in its config's order."""
    return {name: parse_arm(kind, name, raw or {}) for name, raw in arms.items()}
