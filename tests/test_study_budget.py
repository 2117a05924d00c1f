"""studies.budget: a FLOPs study's registered budget reaches every arm without the command giving it, and a command
that gives another budget, or a registration in tokens, is refused before any work."""

import pytest

from armlm.studies.plan import plan
from tests.helpers.configs import study_config

REGISTERED = "++study.budget=1.172e15"  # as a study config's `budget:` registers it, added here to the preset


def pretraining_flops(*overrides: str) -> list[str]:
    """Each pretraining stage's FLOPs budget, one entry per arm (every one must carry exactly one)."""
    stages = plan(study_config("study=efficiency", "scale=gutenwiki", "seeds=1", *overrides))
    budgets = [[o for o in s.overrides if o.startswith("max_flops=")] for s in stages if s.kind == "pretrain"]
    assert all(len(b) == 1 for b in budgets)
    return [b[0] for b in budgets]


def test_a_registered_budget_reaches_every_arm_without_the_command_giving_it(tmp_path):
    # the scale's token count (15.3M) is not read as the command's FLOPs budget
    assert pretraining_flops(f"root={tmp_path}", REGISTERED) == ["max_flops=1172000000000000"] * 5
    # the command may repeat it
    assert pretraining_flops(f"root={tmp_path}", REGISTERED, "budget=1.172e15") == ["max_flops=1172000000000000"] * 5


def test_a_command_budget_other_than_the_registered_one_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"registers its budget: 1.172e\+15 training FLOPs \(study.budget\)"):
        pretraining_flops(f"root={tmp_path}", REGISTERED, "budget=5.86e14")


def test_a_pilot_sets_the_studys_budget_itself(tmp_path):
    # bench/efficiency_pilot.py's rungs: the study's budget replaced, registered or not
    assert pretraining_flops(f"root={tmp_path}", "++study.budget=5.86e14") == ["max_flops=586000000000000"] * 5


def test_a_registered_token_budget_replaces_the_scales(tmp_path):
    stages = plan(study_config("study=ar_vs_mlm", "scale=cpu", "seeds=1", f"root={tmp_path}", "++study.budget=1100000"))
    ar = [s for s in stages if s.kind == "pretrain" and s.arm == "ar"]
    assert len(ar) == 1 and "max_tokens=1100000" in ar[0].overrides


def test_a_flops_study_refuses_a_registered_token_count(tmp_path):
    # a registered budget that is a token count: the registration is named as what to fix, not the command
    with pytest.raises(ValueError, match=r"study.budget=2\.2e\+06: .* looks like a token count.*give study.budget="):
        pretraining_flops(f"root={tmp_path}", "++study.budget=2200000")
