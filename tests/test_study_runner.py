"""studies/runner.py: folders run with other settings are refused before any work, stages run in dependency order
(or only some kinds of them), a failed stage holds its dependants, and a launch cut with its driver is counted."""

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from armlm.common.config import compose_config
from armlm.common.errors import ArmlmError
from armlm.common.migrations import versioned
from armlm.studies.plan import plan
from armlm.studies.run import run_study as run_study_in_process
from armlm.studies.runner import (
    RECORD,
    cut_launch_seconds,
    refuse_stages_that_cannot_start,
    run_in_process,
    run_stages,
    stage_settings,
)
from armlm.studies.stages import STAGE_KINDS
from armlm.training.preflight import check_config
from tests.helpers.configs import study_config
from tests.helpers.lanes import fast_lane_keeps

REPO = Path(__file__).resolve().parents[1]


def test_a_folder_run_with_other_settings_is_refused(tmp_path):
    stages = plan(study_config("scale=smoke", "seeds=1", "arm=mlm", f"root={tmp_path}"))
    pretrain = stages[0]
    pretrain.folder.mkdir(parents=True)
    (pretrain.folder / RECORD).write_text(json.dumps(versioned({**pretrain.record(), "overrides": ["objective=ar"]})))
    with pytest.raises(ValueError, match="was run with other settings"):
        run_stages(stages)
    (pretrain.folder / RECORD).unlink()
    (pretrain.folder / "summary.json").write_text("{}")
    with pytest.raises(ValueError, match="not run by this study"):
        run_stages(stages)


def test_dry_run_orders_stages_after_the_stages_they_read(tmp_path):
    stages = plan(study_config("scale=smoke", "seeds=1", f"root={tmp_path}"))
    outcomes = run_stages(stages, prefix={"pretrain": ["srun", "--ntasks-per-node=4"]}, dry_run=True)
    assert all(o.status == "planned" for o in outcomes)
    pretraining_arms = len(study_config("scale=smoke").study.arms)  # ar_vs_mlm: every arm pretrains
    assert [o.stage.kind for o in outcomes if o.detail.startswith("srun --ntasks-per-node=4 ")] == [
        "pretrain"] * pretraining_arms
    assert outcomes[-1].stage.name == "ar/seed1 diagnose"  # it reads mlm's diagnostics, so it goes after them
    assert not any(tmp_path.iterdir())  # nothing written


def test_a_study_can_run_only_some_kinds_of_stage(tmp_path):
    """More seeds for a fine-tuning finding alone: pretraining and fine-tuning, no diagnostics or scoring."""
    outcomes = run_study_in_process(study_config("scale=smoke", "seeds=1", "first_seed=9", "arm=ar", f"root={tmp_path}",
                                      "stages=[pretrain,finetune]", "dry_run=true", "report=false"))
    kinds = [o.stage.kind for o in outcomes]
    assert kinds[0] == "pretrain" and set(kinds) == {"pretrain", "finetune"}
    assert {o.stage.seed for o in outcomes} == {9} and {o.stage.arm for o in outcomes} == {"ar"}
    with pytest.raises(ValueError, match=r"stages=\['train'\]; choose some of"):
        run_study_in_process(study_config("scale=smoke", "seeds=1", f"root={tmp_path}", "stages=[train]", "dry_run=true"))


@pytest.mark.slow
def test_a_failed_stage_is_reported_and_its_dependants_wait(tmp_path, cache_dir):
    """A stage that fails in its own process (here on a parent checkpoint that is not there, which its command's
    check, made before any stage starts, does not read: in a study it may be another stage's, still to come)."""
    root = tmp_path / "failing"
    result = subprocess.run(
        [sys.executable, "-m", "armlm", "study", "scale=smoke", "seeds=1", "arm=mlm", "tasks=[]", f"root={root}",
         'extra_pretrain=["init_from=/nowhere.ckpt"]'], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 1
    log = result.stdout + result.stderr
    assert "mlm/seed1 pretrain: failed" in log and "exit status 1" in log
    assert "mlm/seed1 diagnose" in log and "waiting  " in log
    record = json.loads((root / "mlm" / "seed1" / "pretrain" / RECORD).read_text())
    assert record["launches"] == 1 and "init_from=/nowhere.ckpt" in record["overrides"]
    assert record["seconds"] > 0  # the launch's wall time, failed or not



def test_a_launch_killed_with_its_driver_is_counted_up_to_its_last_checkpoint(tmp_path):
    class Stage:  # what cut_launch_seconds reads of a stage
        folder = tmp_path
    last = tmp_path / "checkpoints" / "last.ckpt"
    assert cut_launch_seconds({"started_at": 1000.0}, Stage) == 0.0  # no checkpoint: nothing of it is kept
    last.parent.mkdir()
    last.write_bytes(b"")
    os.utime(last, (1600.0, 1600.0))
    assert cut_launch_seconds({"started_at": 1000.0}, Stage) == 600.0
    assert cut_launch_seconds({"started_at": None}, Stage) == 0.0  # that launch came back and counted itself
    assert cut_launch_seconds({}, Stage) == 0.0  # a record from before the field
    assert cut_launch_seconds({"started_at": 2000.0}, Stage) == 0.0  # a checkpoint older than the launch
    os.utime(last, (time.time() + 3600, time.time() + 3600))  # stamped an hour ahead: read as written now
    assert cut_launch_seconds({"started_at": time.time() - 60}, Stage) == pytest.approx(60, abs=5)


def test_a_stage_on_a_pretraining_run_that_learned_nothing_is_refused_unless_asked(tmp_path):
    """Issue 82: a run whose held-out loss ended above its unigram baseline (summary.json learned: false) starts no
    fine-tuning or diagnostics; allow_unlearned=true (the smoke scale's setting) starts them."""
    stages = plan(study_config("scale=cpu", "seeds=1", "arm=mlm", f"root={tmp_path}"))
    pretrain = stages[0]
    pretrain.folder.mkdir(parents=True)
    (pretrain.folder / RECORD).write_text(json.dumps(versioned(pretrain.record())))
    pretrain.done_file.write_text(json.dumps({"learned": False, "val_loss": 6.86, "unigram_baseline": 5.82}))
    outcomes = run_stages(stages, dry_run=True)
    readers = [o for o in outcomes if pretrain.done_file in o.stage.needs]
    assert readers and all(o.status == "refused" for o in readers)
    assert all(str(pretrain.folder) in o.detail and "allow_unlearned=true" in o.detail for o in readers)
    assert all(o.status == "planned" for o in run_stages(stages, dry_run=True, allow_unlearned=True)
               if pretrain.done_file in o.stage.needs)
    pretrain.done_file.write_text(json.dumps({"learned": True}))
    assert all(o.status == "planned" for o in run_stages(stages, dry_run=True) if pretrain.done_file in o.stage.needs)
    assert study_config("scale=smoke").allow_unlearned and not study_config("scale=cpu").allow_unlearned


def sets_a_matmul_precision(cfg):
    """A stage's command that sets torch's process-wide precision, as a pretraining under trainer=gpu does."""
    torch.set_float32_matmul_precision("medium")


def test_an_in_process_stage_leaves_the_matmul_precision_as_it_found_it(tmp_path, monkeypatch):
    """A diagnostics stage, which sets none, ran at the precision the stage before it had set (under trainer=gpu,
    high: TF32), where in a process of its own it ran at highest."""
    stage = plan(study_config("scale=smoke", "seeds=1", "arm=mlm", "tasks=[]", f"root={tmp_path}"))[0]
    monkeypatch.setitem(STAGE_KINDS, stage.kind, replace(STAGE_KINDS[stage.kind],
                                                         run=f"{__name__}:sets_a_matmul_precision"))
    before = torch.get_float32_matmul_precision()
    assert run_in_process(stage, compose_config("train", [])) == 0
    assert torch.get_float32_matmul_precision() == before != "medium"


def test_an_in_process_study_refuses_a_stage_of_several_processes_before_any_work(tmp_path):
    """A DDP rank past the first is started again from the command line of the process it belongs to; inside a study's
    process that line is the study's, and rank 1 died as `unknown command` while the study was killed with rank 0
    (exit 137, after its tokenizer was trained). In-process, such a stage is refused in one line before any stage
    runs, and in its dry run; as processes of their own (the default, nothing composed here) the study goes on."""
    ddp = 'extra_pretrain=["trainer=ddp","trainer.accelerator=cpu","trainer.devices=2"]'
    stages = plan(study_config("scale=smoke", "seeds=1", "arm=mlm", "tasks=[]", f"root={tmp_path}", ddp))
    for dry_run in (False, True):
        with pytest.raises(ArmlmError, match=r"^mlm/seed1 pretrain: its trainer is 2 processes \(trainer.devices=2, "
                                             r"trainer.num_nodes=1\), which launcher=in_process does not start"):
            run_stages(stages, launcher="in_process", dry_run=dry_run)
    assert all(o.status == "planned" for o in run_stages(stages, dry_run=True))
    assert not any(tmp_path.iterdir())  # nothing launched, nothing written


@pytest.mark.parametrize("launcher", fast_lane_keeps(["process", "in_process"], keep=["in_process"]))  # both in CI
def test_a_stage_whose_settings_do_not_compose_or_are_refused_stops_the_launch_before_any_stage(tmp_path, launcher):
    """tasks=[nope] ran the whole pretraining (2 minutes at scale=smoke, hours at scale=cpu) before its fine-tuning
    stage failed to compose; an override of a key that is not there, the same; and a value its command refuses
    (StageKind.check), the same."""
    refused = r": its command refuses its settings \("
    for settings, line in ((["tasks=[nope]"], r"^mlm/seed1 finetune nope-full: its settings do not compose \(In "
                                                r"'finetune': Could not find 'task/nope'; choose one of .*conll2003"),
                           (["tasks=[]", 'extra_pretrain=["optim.lrr=1"]'],
                            r"^mlm/seed1 pretrain: its settings do not compose \(optim.lrr: there is no such setting; "
                            r"did you mean lr\? optim holds "),
                           (["tasks=[rte]", 'extra_finetune=["task.optim.lr=-1"]'],
                            r"^mlm/seed1 finetune rte-full" + refused + r"task.optim.lr=-1: expected a number > 0"),
                           (["tasks=[]", 'extra_pretrain=["objective.mask_prob=0.9"]'],
                            r"^mlm/seed1 pretrain" + refused + r"objective.mask_prob \+ random_prob"),
                           (["tasks=[]", 'extra_pretrain=["+objective.foo=1"]'],  # the class's TypeError
                            r"^mlm/seed1 pretrain" + refused + r".*unexpected keyword argument 'foo'"),
                           (["tasks=[]", 'extra_pretrain=["+data.tokenizer.x=1"]'],
                            r"^mlm/seed1 pretrain" + refused + r"data.tokenizer: .*unexpected keyword argument 'x'"),
                           (["tasks=[]", 'extra_pretrain=["+data.seed=3"]'],  # the run's own seed= overrode it
                            r"^mlm/seed1 pretrain" + refused + r"data.seed: the run sets seed itself"),
                           (["tasks=[rte]", 'extra_finetune=["+trainer.max_epochs=5"]'],  # task.epochs overrode it
                            r"^mlm/seed1 finetune rte-full" + refused + r"trainer.max_epochs: the run sets max_epochs"),
                           (["tasks=[]", 'extra_pretrain=["+seeed=3"]'],  # read by nothing (common.added_settings)
                            r"^mlm/seed1 pretrain" + refused + r"seeed: armlm reads no such setting"),
                           (["tasks=[]", 'extra_diagnose=["+likelihood.draw=4"]'],  # a command without a check
                            r"^mlm/seed1 diagnose" + refused + r"likelihood.draw: armlm reads no such setting")):
        stages = plan(study_config("scale=smoke", "seeds=1", "arm=mlm", f"root={tmp_path}", *settings))
        for dry_run in (False, True):
            with pytest.raises(ArmlmError, match=line):
                run_stages(stages, launcher=launcher, dry_run=dry_run)
    assert not any(tmp_path.iterdir())  # nothing launched, nothing written


def test_a_stages_own_resume_is_left_to_its_run(tmp_path):
    """The check before the launch reads a stage's settings, not the checkpoint it resumes: one that an older armlm
    wrote (here one that is not a checkpoint at all) fails that stage alone at its turn, not every stage."""
    stages = plan(study_config("scale=smoke", "seeds=1", "arm=mlm", "tasks=[]", f"root={tmp_path}"))
    pretraining = next(s for s in stages if s.kind == "pretrain")
    (pretraining.folder / "checkpoints").mkdir(parents=True)
    (pretraining.folder / "checkpoints" / "last.ckpt").write_bytes(b"not a checkpoint")
    assert f"ckpt_path={pretraining.folder}/checkpoints/last.ckpt" in stage_settings(pretraining)
    refuse_stages_that_cannot_start(stages, {})
    composed = compose_config("train", stage_settings(pretraining))  # as the in-process launcher holds it
    refuse_stages_that_cannot_start(stages, {pretraining: composed})
    assert composed.ckpt_path == str(pretraining.folder / "checkpoints" / "last.ckpt")  # its run still resumes
    with pytest.raises(ArmlmError, match="is not a checkpoint file"):  # what its run meets
        check_config(compose_config("train", stage_settings(pretraining)))


@pytest.mark.parametrize("setting,line", [
    ("seeds=abc", "seeds='abc': expected an integer >= 1"),
    ("first_seed=abc", "first_seed='abc': expected an integer >= 1"),
    ("budget=abc", "budget='abc': expected a positive number"),
    ("dry_run=maybe", "dry_run='maybe': expected true or false"),
])
def test_a_study_setting_of_the_wrong_type_is_one_line_before_anything(setting, line, tmp_path):
    """seeds=abc, first_seed=abc and budget=abc ended in int()'s and float()'s tracebacks (studies.run.STUDY_RULES)."""
    with pytest.raises(ArmlmError, match="^" + re.escape(line)):
        run_study_in_process(study_config("scale=smoke", f"root={tmp_path}", setting))
    assert not any(tmp_path.iterdir())
