"""A registration's commit held to git (tests.helpers.registration_commits, the check of this repository's study
configs): in a repository built here commit by commit (so every date and change is known), and over this
repository's own study configs."""

from __future__ import annotations

import copy
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers.registration_commits import git_history_available, registration_problems

REPO = Path(__file__).resolve().parents[1]
CONFIG = "configs/study/toy.yaml"
SIDES = {"a": {"arm": "mlm", "finetune": "conll2003-full", "metric": "f1"},
         "b": {"arm": "ar", "finetune": "conll2003-full", "metric": "f1"}}
FIRST_TEST = {"kind": "superiority", "direction": "greater", "smallest_effect": 0.02}
SECOND_TEST = {**FIRST_TEST, "smallest_effect": 0.05}


def git(repo: Path, *args: str, day: str = "2026-11-20") -> str:
    # Fixed dates make "committed on or before registered.date" exact; -c keeps the user's config out of it.
    env = {**os.environ, "GIT_AUTHOR_DATE": f"{day}T12:00:00+00:00", "GIT_COMMITTER_DATE": f"{day}T12:00:00+00:00"}
    done = subprocess.run(["git", "-C", str(repo), "-c", "user.name=Tester", "-c", "user.email=tester@example.org",
                           "-c", "commit.gpgsign=false", "-c", "core.hooksPath=/dev/null", *args],
                          check=True, capture_output=True, text=True, env=env)
    return done.stdout.strip()


def commit_config(repo: Path, document: dict[str, Any], day: str, name: str = CONFIG) -> str:
    (repo / name).parent.mkdir(parents=True, exist_ok=True)
    (repo / name).write_text(yaml.safe_dump(document, sort_keys=False))
    git(repo, "add", name)
    git(repo, "commit", "-m", f"config on {day}", day=day)
    return git(repo, "rev-parse", "--short", "HEAD")


def finding(claim: str, test: dict[str, Any], registered: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"claim": claim, **copy.deepcopy(SIDES), "test": dict(test), "registered": registered, **more}


@pytest.fixture()
def history(tmp_path: Path) -> dict[str, Any]:
    """A repository whose config registers P1 on 20 November (`first`), then on 22 November (`second`) changes
    P1's test and wording and keeps the first registration as superseded; `before`: a commit without the config."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "-c", "init.defaultBranch=main", "init", "-q")
    (repo / "README.md").write_text("toy\n")
    git(repo, "add", "README.md")
    git(repo, "commit", "-m", "start", day="2026-11-19")
    before = git(repo, "rev-parse", "--short", "HEAD")
    first = commit_config(repo, {"findings": {"P1": finding("MLM tags better", FIRST_TEST, {
        "date": "2026-11-20", "commit": "REGISTRATION"})}}, "2026-11-20")
    superseded = [{"test": dict(FIRST_TEST), "registered": {"date": "2026-11-20", "commit": first}, "why": "too small"}]
    second = commit_config(repo, {"findings": {"P1": finding("MLM tags CoNLL better than AR", SECOND_TEST, {
        "date": "2026-11-22", "commit": "REGISTRATION"}, superseded=superseded)}}, "2026-11-22")
    study = {"findings": {"P1": finding("MLM tags CoNLL better than AR", SECOND_TEST,
                                        {"date": "2026-11-22", "commit": second}, superseded=superseded)}}
    return {"repo": repo, "config": repo / CONFIG, "before": before, "first": first, "second": second, "study": study}


def problems_with(history: dict[str, Any], **registered: Any) -> list[str]:
    """The problems of the fixture's study with P1's registration changed as given."""
    study = copy.deepcopy(history["study"])
    study["findings"]["P1"]["registered"].update(registered)
    return registration_problems(study, history["config"], history["repo"])


def test_a_registration_git_bears_out_has_no_problems(history: dict[str, Any]) -> None:
    assert git_history_available(history["repo"]) is None
    assert registration_problems(history["study"], history["config"], history["repo"]) == []


def test_a_claim_reworded_after_registration_is_no_problem(history: dict[str, Any]) -> None:
    study = copy.deepcopy(history["study"])
    study["findings"]["P1"]["claim"] = "bidirectional MLM tags CoNLL-2003 better than causal AR"
    assert registration_problems(study, history["config"], history["repo"]) == []


def test_an_unknown_commit(history: dict[str, Any]) -> None:
    [problem] = problems_with(history, commit="deadbee")
    assert problem.startswith("toy.yaml finding P1: registered.commit deadbee is no commit of this repository")


def test_a_commit_off_heads_history(history: dict[str, Any]) -> None:
    # A side branch made without a checkout: the second commit's tree committed again on top of the first.
    tree = git(history["repo"], "rev-parse", "HEAD^{tree}")
    side = git(history["repo"], "commit-tree", tree, "-p", history["first"], "-m", "side", day="2026-11-22")
    git(history["repo"], "branch", "side", side)
    [problem] = problems_with(history, commit=side[:7])
    assert f"registered.commit {side[:7]} is not on HEAD's history" in problem


def test_a_date_before_its_commit(history: dict[str, Any]) -> None:
    [problem] = problems_with(history, date="2026-11-21")
    assert f"registered.commit {history['second']} was committed on 2026-11-22, registered.date is 2026-11-21" \
        in problem


def test_a_config_that_did_not_exist_at_the_commit(history: dict[str, Any]) -> None:
    [problem] = problems_with(history, commit=history["before"], date="2026-11-19")
    assert f"{CONFIG} did not exist there" in problem and f"first added in {history['first']}" in problem


def test_a_test_changed_after_registration_names_the_key(history: dict[str, Any]) -> None:
    [problem] = problems_with(history, commit=history["first"], date="2026-11-20")
    assert problem.startswith(f"toy.yaml finding P1: registered.commit {history['first']}: test.smallest_effect "
                              f"was 0.02 at {history['first']}, is 0.05 now; ")


def test_a_superseded_entry_is_held_to_its_own_commit(history: dict[str, Any]) -> None:
    study = copy.deepcopy(history["study"])
    entry = study["findings"]["P1"]["superseded"][0]
    entry["registered"] = {"date": "2026-11-22", "commit": history["second"]}  # the commit of the later test
    [problem] = registration_problems(study, history["config"], history["repo"])
    assert problem.startswith(f"toy.yaml finding P1: superseded[0].registered.commit {history['second']}: "
                              f"test.smallest_effect was 0.05 at {history['second']}, is 0.02 now; ")
    entry["a"] = {**SIDES["a"], "finetune": "conll2003-last"}  # its own sides, where it gives them, are compared
    entry["registered"] = {"date": "2026-11-20", "commit": history["first"]}
    [problem] = registration_problems(study, history["config"], history["repo"])
    assert "superseded[0]" in problem and "a.finetune was 'conll2003-full'" in problem


def test_a_renamed_config_is_read_under_its_earlier_name(history: dict[str, Any]) -> None:
    git(history["repo"], "mv", CONFIG, "configs/study/renamed.yaml")
    git(history["repo"], "commit", "-m", "rename", day="2026-11-23")
    config = history["repo"] / "configs/study/renamed.yaml"
    assert registration_problems(history["study"], config, history["repo"]) == []


def test_git_history_available_names_what_is_missing(history: dict[str, Any], tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    assert "not a git checkout" in (git_history_available(plain) or "")
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{history['repo']}", str(tmp_path / "shallow")],
                   check=True, capture_output=True)
    assert "a shallow clone" in (git_history_available(tmp_path / "shallow") or "")


# Registrations of this repository that git does not bear out, found when the check was written (issue 74); the
# configs are left as they are until each is amended, so a new problem fails here and a fixed one must leave.
KNOWN = {
    # F6_fresh, F7_*: their superseded entries (1fafc9d, b102651) were registered under their old ids (F6_one_epoch,
    # F7_ar_turns_up, ...); F7_*'s sides changed past_exit {exit_below_unigram: 0.5} to {exit_at: 5.3} in 5ce3544,
    # five minutes after their registration at a0303bc. (Curricula's and zeroshot_gutenwiki's commits named the
    # parent of the commit that added their findings, and E1's and F1_prefix_lm's superseded entries gave no sides:
    # corrected on 3 December.)
    "data_constrained.yaml": {"F6_fresh", "F7_ar_pays_for_repetition", "F7_diffusion_pays_less"},
}


@pytest.mark.slow
def test_this_repositorys_registrations_are_borne_out_by_git() -> None:
    reason = git_history_available(REPO)
    if reason:
        pytest.skip(reason)
    found: dict[str, set[str]] = {}
    for config in sorted((REPO / "configs" / "study").glob("*.yaml")):
        study = yaml.safe_load(config.read_text(encoding="utf-8")) or {}
        for problem in registration_problems(study, config, REPO) if study.get("findings") else []:
            print(problem)
            found.setdefault(config.name, set()).add(problem.split(":")[0].removeprefix(f"{config.name} finding "))
    assert found == KNOWN
