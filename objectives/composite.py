"""Objectives made of other objectives: phases one after another (objectives.phased) and rows mixed within every
step (objectives.mixture). What they share: how components are given in a config, checked, told the vocabulary
and the run's progress, and which component answers the questions fine-tuning and scoring ask of a class."""

from __future__ import annotations

from typing import Any, ClassVar

from hydra.utils import get_class
from torch import nn

from armlm.common.errors import ArmlmError
from armlm.common.vocabulary import Vocabulary
from armlm.objectives.base import Objective, TrainingProgress

# What fine-tuning, diagnostics, zero-shot scoring, sampling and export ask of a checkpoint's objective class.
DOWNSTREAM_ATTRIBUTES = ("pretraining_attention", "finetune_attention", "scoring", "masked_conditionals",
                         "mask_in_support", "left_to_right_reader", "masked_prediction_offset", "reference")
# What validation logs: a composite that validates with one component (the last phase) takes these from it too.
VALIDATION_ATTRIBUTES = ("val_loss_kind", "likelihood_metric", "extra_metrics", "perplexity_of", "own_loss_metric",
                         "own_baseline", "own_baseline_kind")


class Composite(Objective):
    """Components as {name: {<setting>: number, objective: <an objective's config>}}: Hydra builds each
    component from its `_target_` (configs/objective/ar_mlm.yaml composes them from the objective group)."""

    setting: ClassVar[str]  # the number each component carries: a phase's "until", a mixture's "weight"
    components_key: ClassVar[str]  # the config key that holds the components (phases, components)

    def __init__(self, components: dict[str, Any]) -> None:
        super().__init__()
        key = self.components_key
        if not isinstance(components, dict) or not components:
            raise ArmlmError(f"objective.{key} must map names to {{{self.setting}: ..., objective: ...}}; "
                             f"got {components!r}")
        parts, settings = {}, {}
        for name, entry in components.items():
            if not isinstance(entry, dict) or set(entry) != {self.setting, "objective"}:
                raise ArmlmError(f"objective.{key}.{name} must have exactly the keys {self.setting} and objective; "
                                 f"got {sorted(entry) if isinstance(entry, dict) else entry!r}")
            value = entry[self.setting]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
                raise ArmlmError(f"objective.{key}.{name}.{self.setting}={value!r} must be a number in (0, 1]")
            if not isinstance(entry["objective"], Objective):
                raise ArmlmError(f"objective.{key}.{name}.objective is not an armlm objective; compose one from the "
                                 f"objective group (defaults: - /objective@{key}.{name}.objective: mlm)")
            if isinstance(entry["objective"], Composite):
                raise ArmlmError(f"objective.{key}.{name}.objective is itself a composite; nest plain objectives only")
            parts[name], settings[name] = entry["objective"], float(value)
        formats = {part.input_format for part in parts.values()}
        if len(formats) > 1:
            raise ArmlmError(f"objective.{key}: the components need different inputs ({sorted(formats)}); one run "
                             "reads one input format, so combine objectives of the same format")
        self.parts = nn.ModuleDict(parts)
        self.settings = settings
        self.input_format = formats.pop()
        self.needs_progress = any(part.needs_progress for part in parts.values())

    def answer_as(self, name: str, attributes: tuple[str, ...]) -> None:
        """Take `attributes` from component `name` (instance attributes shadow the class's)."""
        for attribute in attributes:
            setattr(self, attribute, getattr(self.parts[name], attribute))

    def set_vocabulary(self, vocab: Vocabulary) -> None:
        for part in self.parts.values():
            part.set_vocabulary(vocab)

    def set_progress(self, progress: TrainingProgress | None) -> None:
        for part in self.parts.values():
            part.set_progress(progress)

    @classmethod
    def representative(cls, config: dict[str, Any]) -> str | None:
        """The component whose class answers for checkpoints of `config`, or None where the class itself does."""
        raise NotImplementedError

    @classmethod
    def downstream(cls, config: dict[str, Any]) -> type[Objective]:
        name = cls.representative(config)
        if name is None:
            return cls
        part = config[cls.components_key][name]["objective"]
        part_class = get_class(part["_target_"])
        return part_class.downstream(part)
