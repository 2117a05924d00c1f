"""Settings that do not compose end in one line naming the problem and the fix (common.composition)."""

from __future__ import annotations

import re

import pytest

from armlm.common.composition import why_it_does_not_compose
from tests.helpers.lanes import fast_lane_keeps


@pytest.mark.parametrize(("config", "settings", "line"), fast_lane_keeps([
    # Hydra's five lines advised +optim.lrr=1, which nothing would read
    ("train", ["optim.lrr=1"], r"^optim.lrr: there is no such setting; did you mean lr\? optim holds lr, betas, "),
    ("train", ["seeed=3"], r"^seeed: there is no such setting; did you mean seed\? the top level holds objective, "),
    ("train", ["optm.lr=1"], r"^optm: there is no such setting; did you mean optim\? the top level holds "),
    # a node that builds a class: an argument its YAML leaves out is added (+objective.fixed_count=true)
    ("train", ["objective.fixed_count=true"], r"^objective.fixed_count: there is no such setting; objective holds "
                                              r"mask_rate, mask_prob, .*, and an argument its class takes that the "
                                              r"config leaves out is added with \+objective.<argument>=\.\.\.$"),
    ("zeroshot", ["checkpoint=x", "blimp.max_pair=3"], r"did you mean max_pairs\? blimp holds dir, published, "),
    ("finetune", ["task=rte", "task.epoch=3"], r"^task.epoch: .*did you mean epochs\? task holds "),
    # a missing option: its first line, with the options Hydra lists one a line
    ("train", ["objective=mlmm"], r"^In 'train': Could not find 'objective/mlmm'; choose one of .*, mlm, "),
    ("train", ["optim.lr=[1"], r"^optim.lr=\[1: Hydra cannot parse it \(no viable alternative at input '\[1'; https"),
    ("finetune", ["task=nope"], r"^In 'finetune': Could not find 'task/nope'; choose one of cola, conll2003, "),
], every=3))
def test_settings_that_do_not_compose_are_one_line_naming_the_fix(config, settings, line):
    problem = why_it_does_not_compose(config, settings)
    assert problem is not None and "\n" not in problem
    assert re.search(line, problem), problem


def test_two_missing_keys_are_one_line_naming_both():
    """Hydra reported the first in its five lines; composing without it failed on the second, so the line gave up."""
    problem = why_it_does_not_compose("train", ["optim.lrr=1", "seeed=3", "optm.lr=2"])
    assert problem.startswith("optim.lrr: there is no such setting; did you mean lr? optim holds lr, ")
    assert problem.endswith(" (nor is there seeed, optm)") and "\n" not in problem


def test_a_study_setting_its_reader_takes_is_added_with_a_plus_and_a_typo_there_is_named():
    """study.alpha is read where given (Command.open_settings): it is added, not missing; study.diagnose.candidate_arm
    is a typo of a key the section holds, not one to add."""
    assert why_it_does_not_compose("study", ["study.alpha=0.01"], ("study",)) == (
        "study.alpha: the config leaves it out, and its reader takes it where given: add it with +study.alpha=...")
    assert why_it_does_not_compose("study", ["study.diagnose.candidate_arm=ar"], ("study",)).startswith(
        "study.diagnose.candidate_arm: there is no such setting; did you mean candidates_arm? ")


def test_a_class_node_that_holds_no_setting_of_its_own_says_so():
    assert why_it_does_not_compose("train", ["objective=ar", "objective.fixed_count=true"]).startswith(
        "objective.fixed_count: there is no such setting; objective holds no setting of its own, and an argument its "
        "class takes that the config leaves out is added with +objective.<argument>=...")


@pytest.mark.parametrize(("config", "settings"), [
    ("train", ["hydra.run.dir=/tmp/x", "hydra.job.chdir=false", "hydra/job_logging=disabled", "hydra.verbose=true"]),
    ("train", ["++seed=3", "experiment=smoke", "+objective.fixed_count=true"]),
    ("finetune", ["task=rte", "pretrained=x"]),
    # Hydra's report says these better: its remedies (add --multirun; +hydra.job.env_set.X=1), its file positions
    ("train", ["seed=1,2"]), ("train", ["hydra.job.env_set.X=1"]), ("train", ["seed=2", "optim.betas.x=1"]),
])
def test_settings_that_compose_or_that_hydra_reports_better_give_no_line(config, settings):
    assert why_it_does_not_compose(config, settings) is None
