"""One command line: the `armlm` registry, its dispatcher, the report and bench registries it shares with, the study
runner's stage kinds, the top-level wrappers, and a README that names only commands that exist, links only files that
exist, inside the repository, and stays a front door (<= 12,000 bytes)."""

from __future__ import annotations

import ast
import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from armlm.analysis.reports.registry import REPORTS
from armlm.benchmarks import benchmarks
from armlm.commands import COMMANDS, main
from armlm.common.commands import RANK_COMMAND, Command, dispatch, named_folder_problem, rank_argv, resolve
from armlm.common.config import CONFIGS, compose_config
from armlm.studies.stages import STAGE_KINDS, stage_kind

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
MARKDOWN_LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_every_command_resolves_to_a_function_its_config_and_its_guide():
    for cmd in [*COMMANDS.values(), *REPORTS.values()]:  # a bench's is imported when it runs (below): torch and more
        assert callable(cmd.function()), cmd.name
        assert cmd.config is None or (CONFIGS / f"{cmd.config}.yaml").is_file(), cmd.name
        assert cmd.script is None or (REPO / cmd.script).is_file(), cmd.name
        assert (REPO / cmd.guide).is_file(), cmd.name
        for error in cmd.errors:
            assert issubclass(resolve(error), BaseException), error


def test_every_study_stage_kind_is_one_commands_with_a_done_file():
    assert {"pretrain", "finetune", "diagnose", "zeroshot", "embed"} <= STAGE_KINDS.keys()
    for kind in STAGE_KINDS.values():
        assert kind.done_file and (CONFIGS / f"{kind.config}.yaml").is_file()
        (cmd,) = [c for c in COMMANDS.values() if c.run == kind.run]  # what `armlm <command>` runs, run alike
        assert (cmd.config, cmd.script) == (kind.config, kind.script), kind.kind
    with pytest.raises(ValueError, match="no command runs study stages of kind 'bake'"):
        stage_kind("bake")


def test_help_lists_every_command_and_an_unknown_one_names_the_choices(capsys):
    main(["--help"])
    listed = capsys.readouterr().out
    assert all(re.search(rf"^  {name}\s", listed, re.M) for name in COMMANDS)
    with pytest.raises(SystemExit, match="unknown command 'pretrain'; choose one of train, finetune"):
        main(["pretrain"])


def test_report_and_bench_list_their_choices_and_refuse_unknown_ones(capsys, monkeypatch):
    main(["report", "--help"])
    listed = capsys.readouterr().out
    assert all(f"armlm report {kind} " in listed for kind in REPORTS)
    with pytest.raises(SystemExit, match="unknown report 'everything'"):
        main(["report", "everything", "x"])
    main(["bench", "--help"])
    listed = capsys.readouterr().out
    assert "  throughput\n" in listed and "  flops\n" not in listed  # the scripts, not the modules they share
    with pytest.raises(SystemExit, match="unknown benchmark 'warp_speed'"):
        main(["bench", "warp_speed"])


def test_a_report_and_a_bench_run_as_their_scripts_would(capsys, monkeypatch):
    """Dispatched by one path: each reads sys.argv with its own name in argv[0] (argparse's prog) as before."""
    monkeypatch.setattr(sys, "argv", list(sys.argv))  # the dispatch sets it, as a command's own process would
    with pytest.raises(SystemExit) as stop:
        main(["report", "finetune", "--help"])
    assert stop.value.code == 0 and capsys.readouterr().out.startswith("usage: armlm report finetune ")
    assert benchmarks()["recipe_search"].script == "bench/recipe_search.py"
    with pytest.raises(SystemExit) as stop:
        main(["bench", "recipe_search", "--help"])
    assert stop.value.code == 0 and capsys.readouterr().out.startswith("usage: recipe_search.py ")


def test_a_reports_user_error_is_one_line_and_its_bugs_keep_their_traceback(tmp_path, monkeypatch, caplog):
    """An argument-parser command ends a user error (ArmlmError) as a Hydra command does, and nothing else: a report
    used to turn every ValueError into one line, a bug deep in pandas included."""
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    for kind, says in (("study", "holds no finished pretraining run"), ("findings", "study.json is missing"),
                       ("blimp", "no zeroshot.json under")):
        caplog.clear()
        with pytest.raises(SystemExit) as stop:
            main(["report", kind, str(tmp_path)])
        errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert stop.value.code == 1 and len(errors) == 1, [r.getMessage() for r in errors]
        assert says in errors[0].getMessage() and errors[0].exc_info is None  # one line, no traceback logged
    monkeypatch.setenv("ARMLM_TRACEBACK", "1")
    with pytest.raises(ValueError, match="holds no finished"):
        main(["report", "curves", str(tmp_path)])
    monkeypatch.delenv("ARMLM_TRACEBACK")
    monkeypatch.setattr("armlm.analysis.tables.study_tables.pretraining_runs", lambda root: (_ for _ in ()).throw(ValueError("a bug")))
    with pytest.raises(ValueError, match="a bug"):
        main(["report", "study", str(tmp_path)])

def test_a_rank_lightning_starts_again_gets_its_command_back(monkeypatch):
    """Lightning starts ranks 1.. as `python -m armlm.__main__ <settings>` (tests/test_ddp.py runs one): the name its
    parent, the first rank, left in the environment goes in front, and only there."""
    settings = ["objective=mlm", "hydra.run.dir=run"]
    monkeypatch.setenv(RANK_COMMAND, f"{os.getppid()}:train")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert rank_argv(COMMANDS, settings) == ["train", *settings]
    assert rank_argv(COMMANDS, ["finetune", "task=rte"]) == ["finetune", "task=rte"]  # named on its command line
    assert rank_argv(COMMANDS, ["--help"]) == ["--help"]
    assert rank_argv(REPORTS, settings) == settings  # another registry: not its name
    monkeypatch.setenv(RANK_COMMAND, f"{os.getpid()}:train")  # left by another process than this one's parent
    assert rank_argv(COMMANDS, settings) == settings
    monkeypatch.setenv(RANK_COMMAND, f"{os.getppid()}:train")
    monkeypatch.setenv("LOCAL_RANK", "0")  # the first rank itself, or a process no launcher started
    assert rank_argv(COMMANDS, settings) == settings
    monkeypatch.delenv(RANK_COMMAND)  # torchrun's ranks: LOCAL_RANK set, each named on its own command line
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert rank_argv(COMMANDS, settings) == settings


def test_a_command_run_from_another_folder_reads_the_data_beside_the_checkout(tmp_path, monkeypatch):
    """The configs' data_dir falls back to ../shared/data, which Hydra leaves relative to the working folder: from
    anywhere but the checkout, GLUE, CoNLL and BLiMP were looked for in the wrong place (and GLUE's reader took the
    path for a hub name). Composed or run as a command, it is now data_dir()'s folder, which ranks and stages inherit."""
    beside = REPO.parent / "shared" / "data"
    monkeypatch.delenv("ARMLM_DATA_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    assert compose_config("finetune", ["task=rte"]).task.data.source == f"{beside}/glue"
    seen = {}
    monkeypatch.delenv("ARMLM_DATA_DIR")  # set by the composition: the command's own run sets it again
    monkeypatch.setattr(Command, "function", lambda self: lambda cfg: seen.update(data_dir=cfg.data_dir))
    monkeypatch.setattr(sys, "argv", ["armlm"])
    dispatch({"probe": Command("probe", "", "", "unused:unused", "finetune")}, ["probe", "task=rte"], "armlm",
             "command", "")
    assert seen == {"data_dir": str(beside)}


def test_the_wrappers_are_thin():
    """A top-level script is its docstring, imports, constants and the `__main__` call of the dispatcher."""
    for script in {c.script for c in COMMANDS.values() if c.script}:
        body = ast.parse((REPO / script).read_text()).body
        kinds = {type(node) for node in body}
        assert kinds <= {ast.Expr, ast.Import, ast.ImportFrom, ast.Assign, ast.If}, (script, kinds)
        (main_block,) = [node for node in body if isinstance(node, ast.If)]
        assert ast.unparse(main_block.test) == "__name__ == '__main__'" and "armlm(" in ast.unparse(main_block)


def test_the_readme_is_a_front_door_naming_only_what_exists():
    text = README.read_text(encoding="utf-8")
    assert len(text.encode("utf-8")) <= 12_000  # 12 KB read strictly (not 12 KiB)
    code = "\n".join(re.findall(r"```.*?```|`[^`\n]+`", text, re.S))  # commands are written as code
    named = set(re.findall(r"\barmlm ([a-z]+)\b", code))
    assert named and named <= set(COMMANDS), named - set(COMMANDS)
    for script in re.findall(r"python ([\w/]+\.py)\b", code):
        assert (REPO / script).is_file(), script
    for kind in re.findall(r"armlm report (\w+)", code):
        assert kind in REPORTS, kind
    for name in re.findall(r"armlm bench (\w+)", code):
        assert name == "name" or (REPO / "bench" / f"{name}.py").is_file(), name
    for target in MARKDOWN_LINK.findall(text):
        if target.startswith(("http://", "https://", "#")):
            continue
        path = target.split("#")[0]
        assert not path.startswith("..") and (REPO / path).exists(), target


@pytest.mark.slow  # a process that starts Python
def test_the_console_entry_point_runs_as_a_module():
    result = subprocess.run([sys.executable, "-m", "armlm.commands", "--help"], cwd=REPO, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0 and "usage: armlm <command>" in result.stdout


@pytest.mark.slow  # a process that starts Python
@pytest.mark.parametrize("argv, refusal", [
    (["train", "objective=nope"], "Could not find 'objective/nope'; choose one of all_tokens_mlm, ar, "),
    (["finetune", "task=nope"], "Could not find 'task/nope'; choose one of cola, conll2003, "),
    (["train", "optim.lr=-1"], "optim.lr=-1: expected a number > 0"),
    (["train", "trainer.step.sdpa_backends=[fast]"], "trainer.step.sdpa_backends=['fast']; choose some of"),
    (["finetune", "task=rte"], "task=rte needs pretrained="),
    (["finetune", "task=rte", "pretrained=x", "task.optim.lr=0"], "task.optim.lr=0: expected a number > 0"),
    (["train", "+optim.warmup=100"], "optim.warmup: armlm reads no such setting"),  # Hydra's advice for optim.warmup
    # a command without a check of its own (Command.check) still refuses a setting nothing reads (added_settings)
    (["zeroshot", "checkpoint=x", "+blimp.max_pair=10"], "did you mean max_pairs? blimp holds"),
    # and one its run would not apply (common.unapplied)
    (["finetune", "task=rte", "pretrained=x", "finetune.word_subword=last"], "finetune.word_subword=last: task=rte "),
    (["export", "checkpoint=x"], "out has no value"),
    (["export", "checkpoint=x", "out=y", "format=onnx"], "format='onnx': expected one of"),
])
def test_a_setting_that_does_not_compose_or_is_refused_ends_before_the_commands_module_is_imported(argv, refusal,
                                                                                                   tmp_path):
    """Hydra composes, and the command's check (Command.check) reads the values, before the command's module (and
    Lightning or transformers, seconds of imports) loads: a typo or a value out of range costs the composition and
    the check alone (optim.lr=-1 took 8.6 s to refuse, export without out= 10.0 s)."""
    probe = ("import sys\nfrom armlm.commands import main\ntry:\n"
             f"    main([*{argv!r}, 'hydra.run.dir={tmp_path}'])\n"
             "finally:\n    print('imported:', sorted({'lightning', 'transformers'} & set(sys.modules)))\n")
    result = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and refusal in result.stdout + result.stderr, result.stderr[-2000:]
    assert result.stdout.splitlines()[-1] == "imported: []"


def test_a_commands_check_takes_its_stage_kinds_and_every_check_is_a_function():
    for kind in STAGE_KINDS.values():
        assert COMMANDS[kind.command].check == kind.check, kind.kind
    checks = [c.check for c in COMMANDS.values() if c.check is not None]
    assert {"train", "finetune", "export"} <= {c.name for c in COMMANDS.values() if c.check is not None}
    assert all(callable(resolve(check)) for check in checks)


@pytest.mark.slow  # a process that starts Python and imports Lightning
def test_a_hydra_command_whose_module_imports_lightning_routes_it_through_hydras_handlers(tmp_path):
    """Lightning imported after Hydra configured logging keeps its own console handler beside Hydra's, and prints each
    message twice: run_hydra routes its packages through the root once the command's module is imported."""
    probe = ("import sys\nfrom armlm.common.commands import Command, dispatch\n"
             "probe = Command('probe', '', '', 'tests.helpers.lightning_probe:report_route', 'generate')\n"
             f"dispatch({{'probe': probe}}, ['probe', 'checkpoint=x', 'hydra.run.dir={tmp_path}'], 'armlm', "
             "'command', '')\n")
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    routes = json.loads(result.stdout.strip().splitlines()[-1])
    assert routes and all(propagate and "StreamHandler" not in handlers for propagate, handlers in routes.values())


def test_every_command_that_writes_a_run_folder_says_what_it_would_write_over():
    """A command whose config has a run folder (output_dir) names the result it leaves there (Command.result_file) or
    checks the folder itself (Command.folder_check): a second run into the folder is refused before it replaces
    anything."""
    writers = [c for c in COMMANDS.values() if c.config and "\noutput_dir:" in (CONFIGS / f"{c.config}.yaml").read_text()]
    assert {"train", "finetune", "evaluate", "zeroshot", "embeddings", "generate"} <= {c.name for c in writers}
    for cmd in writers:
        assert cmd.result_file, cmd.name
        assert cmd.folder_check is None or callable(resolve(cmd.folder_check)), cmd.name
    for kind in STAGE_KINDS.values():  # a study stage's done file is what its command refuses to replace
        assert COMMANDS[kind.command].result_file == kind.done_file, kind.kind


@pytest.mark.parametrize("name", ["evaluate", "zeroshot", "embeddings", "generate"])
def test_a_folder_that_holds_a_commands_result_is_refused_before_hydra_writes_there(name, tmp_path):
    cmd = COMMANDS[name]
    line = [f"hydra.run.dir={tmp_path}"]
    assert named_folder_problem(cmd, line) is None  # an empty folder
    (tmp_path / cmd.result_file).write_text("{}")
    assert named_folder_problem(cmd, line) == (
        f"{tmp_path} already holds {cmd.result_file}, an earlier run's result, which this run would replace: give this "
        "run a folder of its own (hydra.run.dir=...), or delete that file first")
    assert named_folder_problem(cmd, []) is None  # Hydra names a new folder (its time, to the second)
    assert named_folder_problem(cmd, ["hydra.run.dir=${oc.env:HOME}"]) is None  # Hydra's to resolve
    for spelt in (f"++hydra.run.dir={tmp_path}", f"output_dir={tmp_path}"):  # the run's folder, however named
        assert named_folder_problem(cmd, [spelt]).startswith(f"{tmp_path} already holds {cmd.result_file}"), spelt


@pytest.mark.parametrize("name", ["train", "finetune"])
def test_a_folder_that_holds_a_run_is_refused_before_hydra_writes_there_unless_it_resumes(name, tmp_path):
    settings = [f"hydra.run.dir={tmp_path}", *(["task=rte", "pretrained=/some/run"] if name == "finetune" else [])]
    cmd = COMMANDS[name]
    assert named_folder_problem(cmd, settings) is None
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.ckpt").write_bytes(b"")
    assert named_folder_problem(cmd, settings).startswith(f"{tmp_path} already holds a run (checkpoints/last.ckpt)")
    assert named_folder_problem(cmd, [*settings, "ckpt_path=last"]) is None
    (tmp_path / "checkpoints" / "last.ckpt").unlink()  # a study's unit restored from a record: its result alone
    (tmp_path / cmd.result_file).write_text("{}")
    assert named_folder_problem(cmd, settings).startswith(f"{tmp_path} already holds {cmd.result_file}, an earlier")


def test_a_folder_check_composes_with_the_command_lines_search_path(tmp_path):
    """A config group of one's own (hydra.searchpath=) composes in the folder check as in the job: without the search
    path, composing ended in Hydra's MissingConfigException traceback before the job started."""
    mine = tmp_path / "mine" / "objective"
    mine.mkdir(parents=True)
    (mine / "mine.yaml").write_text((CONFIGS / "objective" / "ar.yaml").read_text())
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    (tmp_path / "run" / "checkpoints" / "last.ckpt").write_bytes(b"")
    line = [f"hydra.searchpath=[file://{tmp_path / 'mine'}]", "objective=mine", f"hydra.run.dir={tmp_path / 'run'}"]
    assert named_folder_problem(COMMANDS["train"], line).startswith(f"{tmp_path / 'run'} already holds a run")


@pytest.mark.slow  # a process that starts Python
def test_a_refused_run_leaves_the_earlier_runs_record_as_it_was(tmp_path):
    """Hydra writes its record of a run (.hydra/config.yaml, which branches, exports and item tables read) into the run
    folder before the job starts: a second run refused inside the job had already replaced the first run's record."""
    earlier = {name: f"the earlier run's {name}\n" for name in ("config.yaml", "hydra.yaml", "overrides.yaml")}
    (tmp_path / ".hydra").mkdir()
    for name, text in earlier.items():
        (tmp_path / ".hydra" / name).write_text(text)
    (tmp_path / "diagnostics.json").write_text("{}")
    result = subprocess.run([sys.executable, "-m", "armlm", "evaluate", "checkpoint=/some/run",
                             f"hydra.run.dir={tmp_path}"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and "already holds diagnostics.json" in result.stderr, result.stderr[-2000:]
    assert len(result.stderr.strip().splitlines()) == 1
    assert {name: (tmp_path / ".hydra" / name).read_text() for name in earlier} == earlier
