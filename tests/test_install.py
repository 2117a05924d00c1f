"""armlm installed from its wheel, not the checkout: the wheel holds one top-level package, `armlm`, with its configs as
package data, and the commands run from an empty folder elsewhere (issue 85). The wheel goes into a folder of its own
on PYTHONPATH, ahead of the checkout's editable install, so every import below is the wheel's (asserted)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from armlm.common.config import data_dir
from bench.checkout_site import package_dirs

REPO = Path(__file__).resolve().parents[1]
SOURCES = ("pyproject.toml", "README.md", *sorted(set(package_dirs().values())))  # what the wheel is built from
TINY = ["model=tiny", "data.block_size=32", "data.batch_size=8", "data.tokenizer.vocab_size=600", "trainer.max_steps=4",
        "trainer.val_check_interval=4", "trainer.limit_val_batches=2", "trainer.enable_progress_bar=false",
        "max_tokens=null", "trainer.precision=32-true"]
USER_STUDY = """\
name: installed
arms:
  mlm:
    pretrain: [objective=mlm]
tasks: []
default_variants: [full]
finetune_variants:
  full: [finetune.mode=full]
diagnose:
  independence: false
  representations: false
  candidates_arm: null
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The wheel built from a copy of the sources (nothing written into the checkout) and unpacked into site/."""
    root = tmp_path_factory.mktemp("install")
    source = root / "source"
    source.mkdir()
    for name in SOURCES:
        copy = shutil.copytree if (REPO / name).is_dir() else shutil.copy2
        copy(REPO / name, source / name, **({"ignore": shutil.ignore_patterns("__pycache__")}
                                           if (REPO / name).is_dir() else {}))
    wheels = root / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w",
                    str(wheels), str(source)], check=True, capture_output=True, timeout=300)
    wheel = next(wheels.glob("armlm-*.whl"))
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--target",
                    str(root / "site"), str(wheel)], check=True, capture_output=True, timeout=300)
    elsewhere = root / "elsewhere"
    elsewhere.mkdir()
    return {"wheel": wheel, "site": root / "site", "cwd": elsewhere}


def armlm(installed: dict[str, Path], *args: str, ok: bool = True, timeout: int = 300,
          console_script: bool = False) -> subprocess.CompletedProcess:
    """`python -m armlm <args>` (or the wheel's `armlm` console script) from the empty folder, the wheel first on the
    path, the hub offline."""
    env = {**os.environ, "PYTHONPATH": str(installed["site"]), "HF_HUB_OFFLINE": "1",
           "ARMLM_DATA_DIR": str(data_dir())}
    entry = [str(installed["site"] / "bin" / "armlm")] if console_script else ["-m", "armlm"]
    result = subprocess.run([sys.executable, *entry, *args], cwd=installed["cwd"], env=env, text=True,
                            capture_output=True, timeout=timeout)
    if ok:
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result


@pytest.mark.slow
def test_the_wheel_installs_one_top_level_package_with_its_configs(installed):
    names = zipfile.ZipFile(installed["wheel"]).namelist()
    assert {n.split("/")[0] for n in names} == {"armlm", "armlm-0.1.0.dist-info"}
    assert "armlm/configs/train.yaml" in names and "armlm/configs/objective/mlm.yaml" in names
    assert "armlm/models/backbone.py" in names and "armlm/commands.py" in names
    assert not [n for n in names if n.startswith(("armlm/tests/", "armlm/bench/", "armlm/records/"))]
    assert sorted(p.name for p in installed["site"].iterdir() if p.name != "bin") == ["armlm", "armlm-0.1.0.dist-info"]


@pytest.mark.slow
def test_no_armlm_module_is_importable_by_a_bare_name_and_the_wheels_is_the_one_imported(installed):
    probe = ("import importlib.util, armlm, armlm.common.config as c; "
             "print(armlm.__file__); print(c.CHECKOUT); print(c.CONFIGS); "
             "print([n for n in ('common', 'models', 'objectives', 'training', 'armlm_cli', 'analysis') "
             "if importlib.util.find_spec(n)])")
    env = {**os.environ, "PYTHONPATH": str(installed["site"])}
    lines = subprocess.run([sys.executable, "-c", probe], cwd=installed["cwd"], env=env, text=True,
                           capture_output=True, check=True).stdout.splitlines()
    assert lines[0].startswith(str(installed["site"])) and lines[1] == "None"
    assert lines[2] == str(installed["site"] / "armlm" / "configs") and lines[3] == "[]"


@pytest.mark.slow
def test_the_commands_run_from_an_empty_folder_elsewhere(installed):
    """Every command of issue 85's list, from the wheel, in an empty folder. The pretraining runs on two ranks
    through the console script, which Lightning starts again for the second rank with no train.py to start from."""
    cwd = installed["cwd"]
    armlm(installed, "train", "objective=mlm", *TINY, "trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2",
          "hydra.run.dir=runs/mlm", console_script=True)
    assert json.loads((cwd / "runs" / "mlm" / "summary.json").read_text())["tokens_seen"] == 2 * 4 * 8 * 32
    armlm(installed, "evaluate", "checkpoint=runs/mlm", "pairs=2", "candidates=4", "representations.sentences=4",
          "likelihood.blocks=2", "likelihood.draws=2", "likelihood.max_draws=2", "hydra.run.dir=runs/evaluate")
    assert (cwd / "runs" / "evaluate" / "diagnostics.json").is_file()
    armlm(installed, "export", "checkpoint=runs/mlm", "out=exports/mlm")
    assert (cwd / "exports" / "mlm" / "config.json").is_file()
    # a user's own config folder adds a group entry (a study here), as lightning-hydra-template users expect
    (cwd / "my-configs" / "study").mkdir(parents=True)
    (cwd / "my-configs" / "study" / "installed.yaml").write_text(USER_STUDY)
    armlm(installed, "study", f"hydra.searchpath=[file://{cwd / 'my-configs'}]", "study=installed", "scale=smoke",
          "seeds=1", "budget=20000", "stages=[pretrain]", "report=false", "root=runs/study", "launcher=in_process",
          'extra_pretrain=["trainer.enable_progress_bar=false","data.tokenizer.vocab_size=600","model=tiny"]')
    assert (cwd / "runs" / "study" / "mlm" / "seed1" / "pretrain" / "summary.json").is_file()
    bench = armlm(installed, "bench", "throughput", ok=False)
    assert bench.returncode != 0 and "bench/ runs from a checkout of armlm" in bench.stderr
    assert "Traceback" not in bench.stderr
    # the commands that read the data folder, on the same run (one test: one wheel, one pretraining run)
    if not (data_dir() / "blimp").is_dir() or not (data_dir() / "glue").is_dir():
        pytest.skip(f"train, evaluate, export, study and bench ran; zeroshot and finetune need BLiMP and GLUE under "
                    f"{data_dir()} (ARMLM_DATA_DIR)")
    armlm(installed, "zeroshot", "checkpoint=runs/mlm", "blimp.max_pairs=2", "bootstrap.resamples=10",
          "hydra.run.dir=runs/zeroshot")
    assert (cwd / "runs" / "zeroshot" / "zeroshot.json").is_file()
    armlm(installed, "finetune", "task=rte", "pretrained=runs/mlm", "task.data.max_train_examples=16",
          "task.data.max_eval_examples=16", "trainer.enable_progress_bar=false", "hydra.run.dir=runs/rte")
    assert (cwd / "runs" / "rte" / "results.json").is_file()
