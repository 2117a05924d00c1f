"""What each arm of a study pretrains for: input tokens (the scale's budget, or passes over the data) or training
FLOPs (budget_kind: flops, every objective at equal compute), the train.py settings that become, and the checks
made before any stage runs. A study may register its budget (`budget:` in its config, in its budget kind): a FLOPs
study once a pilot has fixed it (the command then need not give it, and one that gives another is refused), a token
study where its registration fixes another budget than its scale's (that budget replaces the scale's)."""

from __future__ import annotations

import math
from typing import Any

from omegaconf import DictConfig

from armlm.common.errors import ArmlmError
from armlm.studies.arms import PipelineArm

# What a study's `budget` counts, and the train.py setting it becomes (the other budget is set to null).
BUDGET_KEYS = {"tokens": "max_tokens", "flops": "max_flops"}
MIN_FLOPS_BUDGET = 1e9  # below this a FLOPs budget is surely a token count given by mistake (a scale's default)


def budget_kind(cfg: DictConfig) -> str:
    """What `budget` counts: the study's own `budget_kind` where it registers one (a comparison at equal compute),
    else the command's, else input tokens. A command naming another kind than the study registered is refused."""
    own, given = cfg.study.get("budget_kind"), cfg.get("budget_kind")
    if own and given and own != given:
        raise ArmlmError(f"budget_kind={given}, but study {cfg.study.name} is registered at an equal budget of {own}; "
                         f"drop budget_kind= (and give budget= in {own})")
    return str(own or given or "tokens")


def study_budget(cfg: DictConfig) -> float:
    """Each arm's budget before its budget_scale: the study's registered `budget` where it has one, else the
    command's (or the scale's) `budget`. Every scale's budget is a token count, below MIN_FLOPS_BUDGET, so a FLOPs
    budget there was given by the command; one that is not the registered budget is refused."""
    own, given = cfg.study.get("budget"), float(cfg.budget)
    if own is None:
        return given
    if given >= MIN_FLOPS_BUDGET and not math.isclose(given, float(own), rel_tol=1e-6):
        raise ArmlmError(f"budget={cfg.budget}, but study {cfg.study.name} registers its budget: {float(own):g} "
                         "training FLOPs (study.budget); drop budget=, or set study.budget= for a run outside the "
                         "registration (a pilot)")
    return float(own)


def arm_budget(cfg: DictConfig, arm: PipelineArm) -> int:
    return int(study_budget(cfg) * float(1.0 if arm.budget_scale is None else arm.budget_scale))


def unique_tokens(cfg: DictConfig, arm: PipelineArm) -> Any:
    return arm.unique_tokens if arm.given("unique_tokens") else cfg.study.get("unique_tokens")


def budget_overrides(cfg: DictConfig, arm: PipelineArm) -> list[str]:
    """train.py's budget settings for an arm: its input tokens, or its training FLOPs (models.flops) with no
    token budget, as the study's budget_kind says."""
    if arm.given("epochs"):  # passes over the arm's slice (or the whole split), counted by train.py as the loader gives
        unique = unique_tokens(cfg, arm)
        return ["max_tokens=null", f"data_epochs={arm.epochs}",
                *([] if unique is None else [f"data.max_train_tokens={int(unique)}"])]
    key = BUDGET_KEYS[budget_kind(cfg)]
    # Only what differs from train.yaml (max_flops and data_epochs default to null), so a stage's recorded
    # overrides stay those of studies run before the FLOPs budget existed.
    return ([] if key == "max_tokens" else ["max_tokens=null"]) + [f"{key}={arm_budget(cfg, arm)}"]


def part_way_point(cfg: DictConfig, arm: PipelineArm, arms: dict[str, PipelineArm]) -> int:
    """The input tokens at which an arm with `from_arm` and `checkpoint_fraction` reads its source's run."""
    return int(arm_budget(cfg, arms[str(arm.from_arm)]) * float(arm.checkpoint_fraction or 0))


def part_way_tokens(cfg: DictConfig, arm_name: str, arms: dict[str, PipelineArm]) -> list[int]:
    """The token counts at which `arm_name`'s pretraining must leave a checkpoint for the arms that
    fine-tune it part-way (`from_arm: <arm_name>` with `checkpoint_fraction`)."""
    return sorted({part_way_point(cfg, a, arms) for a in arms.values()
                   if a.from_arm == arm_name and a.given("checkpoint_fraction")})


def check_budget(cfg: DictConfig, arms: dict[str, PipelineArm]) -> None:
    """The arms' budgets, checked before any stage runs."""
    study = cfg.study
    for name, arm in arms.items():
        if not arm.given("epochs"):
            if arm.given("unique_tokens"):
                raise ArmlmError(f"arm {name}: unique_tokens sets the data of an arm that trains for epochs; add epochs")
            continue
        unique = unique_tokens(cfg, arm)
        if unique is not None and (isinstance(unique, bool) or not isinstance(unique, int) or unique < 1):
            raise ArmlmError(f"arm {name} trains for a number of epochs over unique_tokens (the arm's, else the "
                             f"study's), which is {unique!r}; give a positive number of tokens, or null for the "
                             "whole train split")
        if arm.given("budget_scale") or not isinstance(arm.epochs, (int, float)) or not arm.epochs > 0:
            raise ArmlmError(f"arm {name}: epochs={arm.epochs!r} must be > 0, and an arm takes epochs or "
                             "budget_scale, not both")
    kind = budget_kind(cfg)
    if kind not in BUDGET_KEYS:
        raise ArmlmError(f"budget_kind={kind!r}; choose one of {sorted(BUDGET_KEYS)}")
    registered = study.get("budget") is not None
    budget = study_budget(cfg)
    key = "study.budget" if registered else "budget"  # where the fix goes: the registration or the command
    if not budget > 0:
        raise ArmlmError(f"{key}={budget:g}: give the pretraining budget per arm, in {kind}")
    if kind != "tokens":
        token_arms = [n for n, a in arms.items() if any(a.given(k) for k in ("checkpoint_fraction", "epochs",
                                                                                 "budget_scale"))]
        if token_arms:
            raise ArmlmError(f"budget_kind={kind}: arms {token_arms} are defined in input tokens (a checkpoint at a "
                             "token count, passes over the data, or a share of the token budget such as equal "
                             "predicted tokens), which a FLOPs budget would not keep; drop them (e.g. "
                             f"'~study.arms.{token_arms[0]}') or use budget_kind=tokens")
        if budget < MIN_FLOPS_BUDGET:
            raise ArmlmError(f"budget_kind={kind} with {key}={budget:g}: {budget:g} FLOPs looks like a token count "
                             f"(a scale's budget); give {key}= in training FLOPs (AR at the cpu scale's 2.2M tokens "
                             "spends 4.6e13)")

