"""Each command's known user errors, run through the console entry point as a user would: one ERROR line naming the
problem and the fix, exit status 1, no traceback (common.cli), nothing cached. A regression here is what a user sees
first: the hub's offline hint once escaped as a 60-line traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# command line -> what its one line must say
USER_ERRORS = {
    "train objective.mask_prob=0.9": "must sum to 1",  # data.batch_size=0 and the like: tests/test_configs.py
    # Hydra's five lines, which advised +optim.lrr=1 (read by nothing: common.added_settings refuses it)
    "train optim.lrr=1": "optim.lrr: there is no such setting; did you mean lr? optim holds lr, ",
    # a setting the study's planner reads where given (Command.open_settings): added, not missing
    "study study=ar_vs_mlm scale=smoke study.alpha=0.01": "add it with +study.alpha=...",
    # a sweep without -m: its job is checked, not its command line (which would not compose in one run)
    "train hydra.mode=MULTIRUN seed=1,2 optim.lr=-1": "optim.lr=-1: expected a number > 0",
    "finetune task=conll2003": "task=conll2003 needs pretrained=",
    "finetune task=conll2003 pretrained=/nowhere/run": "/nowhere/run does not exist",
    "zeroshot checkpoint=hf:no-such/model": "hf:no-such/model cannot be loaded: HF_HUB_OFFLINE is set",
    "evaluate checkpoint=/nowhere.ckpt": "/nowhere.ckpt does not exist",
    "generate checkpoint=/nowhere.ckpt": "/nowhere.ckpt does not exist",
    "export checkpoint=/nowhere.ckpt": "out has no value; give it on the command line",
    "study study=findings scale=smoke seeds=0": "seeds=0, first_seed=1",
    # a user's own study config without a key the planner reads (an omegaconf traceback until 5 December 2026)
    "study study=ar_vs_mlm scale=smoke ~study.finetune_variants": "lacks ['finetune_variants']",
    "study study=ar_vs_mlm scale=smoke +study.planner=armlm.studies.plan.plan": "name it as module:function",
}


@pytest.mark.slow
@pytest.mark.parametrize("command", sorted(USER_ERRORS))
def test_a_commands_user_error_is_one_line_through_the_cli(command, tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("ARMLM_TRACEBACK", None)
    env.pop("ARMLM_CACHE_DIR", None)  # the token cache goes to .cache/armlm where the command runs
    where = [f"root={tmp_path / 'root'}"] if command.startswith("study") else []  # a study's folder, else Hydra's
    result = subprocess.run([sys.executable, "-m", "armlm.commands", *command.split(),
                             f"hydra.run.dir={tmp_path / 'run'}", *where],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    output = result.stdout + result.stderr
    errors = [line for line in output.splitlines() if "[ERROR]" in line]
    assert result.returncode == 1, output[-2000:]
    assert len(errors) == 1 and USER_ERRORS[command] in errors[0], output[-2000:]
    assert "Traceback" not in output
    assert not (tmp_path / ".cache").exists()  # refused before any data was read: no tokenizer trained, no cache
