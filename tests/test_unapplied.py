"""common.unapplied: a setting the command line gives that the run it is given to does not apply is refused in one
line (each command's Command.unapplied says which, for its composed config); the config's own values, and a setting
an interpolation reads, are not."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from armlm.commands import COMMANDS
from armlm.common.commands import check_command, resolve
from armlm.common.errors import ArmlmError
from armlm.common.unapplied import SHARED_SETTINGS, given_settings
from armlm.studies import runner
from armlm.studies.plan import plan
from tests.helpers.configs import composed_config, study_config

RTE, CONLL = ["task=rte", "pretrained=/some/run"], ["task=conll2003", "pretrained=/some/run"]


def checked(command: str, *settings: str) -> None:
    cmd = COMMANDS[command]
    check_command(cmd, composed_config(cmd.config, list(settings)), list(settings))


def test_every_command_that_names_unapplied_settings_names_them_for_its_defaults():
    named = {name: cmd for name, cmd in COMMANDS.items() if cmd.unapplied}
    assert {"train", "finetune", "zeroshot", "embeddings", "study"} <= set(named)
    for name, cmd in named.items():
        settings = RTE if name == "finetune" else []
        unapplied = resolve(cmd.unapplied)(composed_config(cmd.config, settings))
        assert isinstance(unapplied, dict) and all(isinstance(why, str) and why for why in unapplied.values()), name
        checked(name, *settings)  # the config's own values are not refused


@pytest.mark.parametrize("command,settings,refusal", [
    # probed: each ran to the end, exit 0, its results recording a setting the run never read
    ("train", ["trainer.step.compile_mode=max-autotune"], "trainer.step.compile_mode=max-autotune: trainer.step.compile "
                                                         "is false, so the step runs eager"),
    ("finetune", [*RTE, "finetune.word_subword=last"], "finetune.word_subword=last: task=rte labels whole inputs"),
    ("finetune", [*RTE, "finetune.mode=features", "finetune.feature_layers=2"], "finetune.feature_layers=2: task=rte"),
    ("finetune", [*RTE, "task.optim.mix_lr=0.01"], "task.optim.mix_lr=0.01: only finetune.mode=features "
                                                   "finetune.features=scalar_mix mixes layers"),
    ("finetune", [*RTE, "task.optim.features_lr=0.5"], "task.optim.features_lr=0.5: finetune.mode=full trains"),
    ("finetune", [*CONLL, "finetune.pooling=mean"], "finetune.pooling=mean: task=conll2003 tags words"),
    ("finetune", [*CONLL, "finetune.mode=features", "task.optim.lr=1e-3"], "task.optim.lr=1e-3: finetune.mode=features "
                                                                           "trains the head alone"),
    ("finetune", [*CONLL, "finetune.mode=features", "finetune.features=scalar_mix", "finetune.feature_layers=2"],
     "finetune.feature_layers=2: finetune.features=scalar_mix mixes every layer"),
    ("finetune", ["task=conll2003", "vectors=/some/vectors", "finetune.attention=causal"],
     "finetune.attention=causal: vectors= tags with a head on static word vectors, without a backbone"),
    ("finetune", ["task=conll2003", "vectors=/some/vectors", "task.optim.lr=1e-4"], "task.optim.lr=1e-4: vectors= "),
    ("zeroshot", ["checkpoint=/some/run", "blimp.context.tokens=48"], "blimp.context.tokens=48: blimp.context.file is "
                                                                      "null"),
    ("zeroshot", ["checkpoint=/some/run", "blimp.context.file=''", "blimp.context.tokens=48"], "blimp.context.tokens=48"),
    ("embeddings", ["checkpoint=/some/run", "method.dim=300"], "method.dim=300: checkpoint= reads a model's type-level"),
    ("embeddings", ["checkpoint=/some/run", "data.tokenizer.vocab_size=4096"], "data.tokenizer.vocab_size=4096: "),
    ("embeddings", ["contextual.max_contexts=1"], "contextual.max_contexts=1: without checkpoint= the run trains static"),
    ("study", ["study=findings", "scale=smoke", "checkpoints_from=/some/study"],
     "checkpoints_from=/some/study: study=findings's planner reads no checkpoints_from"),
])
def test_a_setting_the_run_does_not_apply_is_refused(command, settings, refusal):
    with pytest.raises(ArmlmError, match="^" + re.escape(refusal) + ".*so this setting would change nothing; drop it$"):
        checked(command, *settings)


@pytest.mark.parametrize("command,settings", [
    ("train", ["trainer.step.compile=true", "trainer.step.compile_backend=aot_eager"]),
    ("train", ["trainer=gpu", "trainer.accelerator=cpu", "trainer.step.compile_mode=reduce-overhead"]),
    ("finetune", [*CONLL, "finetune.word_subword=last", "finetune.attention=causal"]),
    ("finetune", [*CONLL, "finetune.mode=features", "finetune.features=scalar_mix", "task.optim.mix_lr=0.01"]),
    ("finetune", [*RTE, "finetune.pooling=mean", "task.optim.lr=1e-4"]),
    ("finetune", ["task=conll2003", "vectors=/some/vectors", "task.optim.features_lr=1e-2", "finetune.dropout=0.2"]),
    ("zeroshot", ["checkpoint=/some/run", "blimp.context.file=/some/text", "blimp.context.tokens=48"]),
    ("embeddings", ["checkpoint=/some/run", "method.min_count=3"]),  # contextual.min_count reads it
    ("embeddings", ["method.dim=50", "data.tokenizer.vocab_size=4096"]),
    ("study", ["study=embeddings", "scale=smoke", "checkpoints_from=/some/study"]),
])
def test_a_setting_the_run_applies_passes(command, settings):
    checked(command, *settings)


def test_the_command_lines_settings_are_read_with_their_prefixes_and_hydras_own_left_out():
    assert given_settings(["+a.b=1", "++c=x=y", "~d=2", "hydra.run.dir=/x", "e", "f@g=h", "task=rte"]) == {
        "a.b": "1", "c": "x=y", "d": "2", "task": "rte"}


def test_a_setting_shared_with_other_runs_is_named_in_a_warning_not_refused(monkeypatch, caplog):
    """A study gives its variants and shared settings to every task, mode and arm (the 2 x 2's word_subword=last on the
    smoke scale's RTE): its launch check leaves them to the stages, and a stage's process, or a sweep's job, names each
    that it does not apply in a WARNING line instead of refusing it, as the command line would."""
    settings = [*RTE, "finetune.word_subword=last"]
    cfg = composed_config("finetune", settings)
    check_command(COMMANDS["finetune"], cfg, settings, unapplied="skip")
    assert not caplog.records
    line = "finetune.word_subword=last: task=rte labels whole inputs from the last layer's pooled state, so this " \
           "setting changes nothing in this run (a setting shared with other runs, which may apply it)"
    check_command(COMMANDS["finetune"], cfg, settings, unapplied="warn")
    monkeypatch.setenv(SHARED_SETTINGS, "ar/seed1 finetune rte-causal")
    check_command(COMMANDS["finetune"], cfg, settings)
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [("WARNING", line)] * 2


def test_a_resumed_run_repeats_its_command_and_is_not_refused():
    """Its checkpoint holds the settings it started with (finetune.run.check_finetune_resumable compares them): a
    setting refused now must not stop the resume of a run that took it, nor its removal fail the comparison."""
    settings = [*RTE, "finetune.word_subword=last", "ckpt_path=/some/run/checkpoints/last.ckpt"]
    check_command(COMMANDS["finetune"], composed_config("finetune", settings), settings)


@pytest.mark.slow  # a process that starts Python
def test_a_sweeps_job_warns_of_a_setting_it_does_not_apply_and_runs(tmp_path):
    """-m ... finetune.word_subword=last: a sweep's settings go to every job (task=rte,conll2003 would give it to both),
    so a job that does not apply one says so and runs."""
    result = subprocess.run([sys.executable, "-m", "armlm", "finetune", "-m", "task=rte", "pretrained=/some/run",
                             "finetune.word_subword=last", f"hydra.sweep.dir={tmp_path}"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    output = result.stdout + result.stderr
    assert "finetune.word_subword=last: task=rte labels whole inputs" in output and "drop it" not in output
    assert result.returncode == 1 and "ArmlmFileError: /some/run does not exist" in output, output[-2000:]  # the job ran on


def test_a_stage_the_study_starts_as_a_process_finds_it_is_a_study_stage(tmp_path, monkeypatch):
    stage = next(s for s in plan(study_config("scale=smoke", "seeds=1", "arm=ar", f"root={tmp_path}"))
                 if s.kind == "finetune")
    seen = {}

    def started(argv, env=None):
        seen.update(env or {})
        return subprocess.CompletedProcess(argv, 1)
    monkeypatch.setattr(runner.subprocess, "run", started)
    assert runner.launch(stage, {}).status == "failed"
    assert seen.get(SHARED_SETTINGS) == stage.name


def test_an_in_process_stage_names_a_shared_setting_it_does_not_apply(tmp_path, monkeypatch, caplog):
    """launcher=in_process runs each stage's function directly, past its command line: it says what a stage's process
    would say."""
    import armlm.finetune.command  # Lightning's import: this test's alone

    cfg = study_config("scale=smoke", "seeds=1", "arm=ar", "tasks=[rte]", f"root={tmp_path}",
                       'extra_finetune=["finetune.word_subword=last"]')
    stage = next(s for s in plan(cfg) if s.kind == "finetune")
    ran = []
    monkeypatch.setattr(armlm.finetune.command, "finetune", ran.append)
    assert runner.run_in_process(stage, runner.in_process_config(stage)) == 0 and len(ran) == 1
    assert any(r.levelname == "WARNING" and r.getMessage().startswith("finetune.word_subword=last: task=rte labels")
               for r in caplog.records)
