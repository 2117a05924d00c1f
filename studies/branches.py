"""Study arms that branch off a longer arm's run (training.branches): an arm with `branch_of: <trunk arm>` pretrains
by resuming the trunk's run of the same seed where its own learning-rate decay starts, so a curve of budgets costs
its longest run plus the decays of the others. Both arms train for passes over the data (`epochs`) under a
warmup-stable-decay schedule (optim.decay_fraction, in the study's `pretrain_settings`)."""

from __future__ import annotations

from pathlib import Path

from armlm.common.errors import ArmlmError
from armlm.studies.arms import PipelineArm


def check_branches(arms: dict[str, PipelineArm]) -> None:
    """A branch names an earlier pretraining arm with more passes, which is not itself a branch."""
    names = list(arms)
    for name, arm in arms.items():
        trunk_name = arm.branch_of
        if trunk_name is None:
            continue
        trunk = arms.get(trunk_name)
        if (trunk is None or trunk.branch_of or trunk.from_arm or not trunk.given("epochs")
                or names.index(trunk_name) > names.index(name)):
            raise ArmlmError(f"arm {name}: branch_of={trunk_name!r} must name an earlier pretraining arm of this "
                             "study that trains for epochs and is not itself a branch")
        if not arm.given("epochs") or not float(arm.epochs) < float(trunk.epochs) or arm.given("unique_tokens"):
            raise ArmlmError(f"arm {name}: a branch trains for fewer epochs than its trunk {trunk_name} "
                             f"({trunk.epochs}), over the trunk's data; give epochs < {trunk.epochs}")
        if arm.given("pretrain") and list(arm.pretrain) != list(trunk.pretrain or ()):
            raise ArmlmError(f"arm {name}: pretrain {list(arm.pretrain)} differs from its trunk {trunk_name}'s "
                             f"{list(trunk.pretrain)}; a branch continues the trunk's run and may differ only in epochs")


def trunk_overrides(arms: dict[str, PipelineArm], arm_name: str) -> list[str]:
    """A trunk's train.py setting: the budgets (passes) whose decay starts it must save."""
    budgets = sorted(a.epochs for a in arms.values() if a.branch_of == arm_name)  # as the arms give them
    return [f"branch_budgets=[{','.join(repr(b) for b in budgets)}]"] if budgets else []


def branch_overrides(arm: PipelineArm, trunk_run: Path) -> list[str]:
    """A branch's train.py setting: the trunk's run folder of the same seed (its done file is the stage's need)."""
    return [f"branch_from={trunk_run}"] if arm.branch_of else []
