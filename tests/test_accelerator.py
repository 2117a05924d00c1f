"""A run asks the machine for the device its trainer config names (training.devices.check_machine, in every run that
builds a Trainer), and a command that reads a model without one for its device= (common.devices.check_device),
before any data or model is read; the config itself stays valid on any machine (a study's GPU presets are checked on
CPUs)."""

from __future__ import annotations

import pytest
import torch

from armlm.common.devices import check_device
from armlm.common.errors import ArmlmError
from armlm.diagnostics.run import run_diagnostics
from armlm.finetune.command import finetune
from armlm.generation.run import run_generation
from armlm.training.devices import check_accelerator, world_size
from armlm.training.preflight import check_config
from armlm.training.run import run_pretraining
from armlm.zeroshot.run import run_zeroshot
from tests.helpers.configs import composed_config


@pytest.fixture
def present(monkeypatch):
    """Which devices torch sees, as the test sets them (none to start with)."""
    devices = {"cuda": False, "mps": False}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: devices["cuda"])
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: devices["mps"])
    return devices


def trainer(*overrides: str):
    return composed_config("train", overrides).trainer


def test_a_gpu_trainer_on_a_machine_without_one_is_refused_before_any_data(present, tmp_path):
    """trainer=gpu on a laptop: one line naming the fix, before a tokenizer is trained or a cache written (it was
    Hydra's multi-line "Error in call to target ... No supported gpu backend found!", after both)."""
    cache, out = tmp_path / "cache", tmp_path / "run"
    for name in ("gpu", "ddp"):
        cfg = composed_config("train", [f"trainer={name}", f"data.cache_dir={cache}", f"output_dir={out}"])
        check_config(cfg)
        with pytest.raises(ArmlmError, match=r"trainer.accelerator=gpu .* sees none; on this machine leave trainer=cpu"):
            run_pretraining(cfg)
    assert not cache.exists() and not out.exists()
    check_accelerator(trainer("trainer=gpu", "trainer.accelerator=cpu"))  # the fix it names


@pytest.mark.parametrize("source", ["pretrained=/nowhere/run", "vectors=/nowhere/vectors"])
@pytest.mark.parametrize(("asked", "refusal"), [
    ("trainer=gpu", "trainer.accelerator=gpu .* sees none"),
    ("logger=[wandb]", "logger=wandb: W&B finds no API key"),
])
def test_both_kinds_of_fine_tuning_check_the_machine_before_opening_what_they_tune(present, without_wandb_credentials,
                                                                                  tmp_path, source, asked, refusal):
    """From a checkpoint or from static vectors (which skipped the device check and met Lightning's "No supported gpu
    backend found!" after its vectors and data were read), the machine is checked first: neither /nowhere is opened."""
    cfg = composed_config("finetune", ["task=conll2003", asked, source, f"output_dir={tmp_path / 'run'}"])
    with pytest.raises(ArmlmError, match=refusal):
        finetune(cfg)
    assert not (tmp_path / "run").exists()


def test_each_accelerator_name_asks_for_its_own_device(present):
    present["mps"] = True  # Apple silicon: Lightning's `gpu` is MPS there
    check_accelerator(trainer("trainer=gpu"))
    check_accelerator(trainer("trainer.accelerator=MPS"))
    with pytest.raises(ArmlmError, match="trainer.accelerator=cuda"):
        check_accelerator(trainer("trainer.accelerator=cuda"))
    present.update(cuda=True, mps=False)
    check_accelerator(trainer("trainer=gpu"))
    check_accelerator(trainer("trainer.accelerator=cuda"))
    with pytest.raises(ArmlmError, match="trainer.accelerator=mps"):
        check_accelerator(trainer("trainer.accelerator=mps"))
    check_accelerator(trainer("trainer.accelerator=auto"))  # Lightning's choice: whatever is there


@pytest.mark.parametrize(("overrides", "processes"), [
    ((), 1),
    (("trainer=ddp", "trainer.accelerator=cpu"), 1),  # devices: auto, one on a CPU
    (("trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2"), 2),
    (("trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=1", "+trainer.num_nodes=3"), 3),
    (("trainer.devices=4", "+trainer.strategy=ddp_spawn"), 4),
])
def test_the_world_size_is_lightnings_count_of_the_trainers_processes(overrides, processes):
    cfg = composed_config("train", list(overrides))
    assert world_size(cfg) == processes


def test_a_device_setting_names_what_this_machine_lacks(present, monkeypatch):
    """A command's device= (cpu, cuda, cuda:<index>, mps) is here, its index too; a name torch does not parse is one
    line too, not torch's RuntimeError."""
    check_device("cpu")
    with pytest.raises(ArmlmError, match=r"^device=cuda: torch .* sees no cuda device on this machine; give device=cpu"):
        check_device("cuda")
    present["cuda"] = True
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    check_device("cuda")
    check_device("cuda:0")
    with pytest.raises(ArmlmError, match=r"^device=cuda:1: torch .* sees 1 cuda device on this machine"):
        check_device("cuda:1")
    with pytest.raises(ArmlmError, match=r"^device=mps: torch .* sees no mps device"):
        check_device("mps")
    with pytest.raises(ArmlmError, match=r"^device=gpu0 is not a device torch names \(.*\); give device=cpu"):
        check_device("gpu0")


@pytest.mark.parametrize(("command", "run"), [("zeroshot", run_zeroshot), ("evaluate", run_diagnostics),
                                              ("generate", run_generation)])
def test_each_command_that_reads_a_model_without_a_trainer_checks_its_device_before_reading_it(present, command,
                                                                                               run, tmp_path,
                                                                                               blimp_dir):
    """device=cuda on a CPU machine met torch's own error once the checkpoint was read: now one line first (the
    checkpoint, /nowhere, is never opened). Zeroshot reads its BLiMP folder before the model: a small one of its own."""
    cfg = composed_config(command, ["checkpoint=/nowhere/run", "device=cuda"], output_dir=str(tmp_path),
                          **({"blimp.dir": str(blimp_dir)} if command == "zeroshot" else {}))
    with pytest.raises(ArmlmError, match=r"^device=cuda: torch .* sees no cuda device on this machine"):
        run(cfg)
