"""The efficiency study's pilot ladder: each run is the study's own pretraining stage at a multiple of the base
budget, and the gate is read from what the run logged (a brute-force share from the logged margins)."""

from __future__ import annotations

import json

import pytest
from torch.utils.tensorboard import SummaryWriter

import bench.efficiency_pilot as efficiency_pilot


def args_of(tmp_path):
    return efficiency_pilot.argparse.Namespace(
        root=tmp_path, study="efficiency", scale="gutenwiki", base_budget=2.5e13, seed=20,
        extra_pretrain=["trainer=gpu", "trainer.val_check_interval=1000"])


def test_a_pilot_is_the_studys_pretraining_stage_at_a_multiple_of_the_budget(tmp_path):
    pilot = efficiency_pilot.pilot_of(args_of(tmp_path), "electra", 16)
    command = pilot.command[1:]
    assert command[0].endswith("study.py")
    assert "budget=4e+14" in command and "arm=electra" in command and "first_seed=20" in command
    assert "stages=[pretrain]" in command and f"root={tmp_path / 'x16-electra'}" in command
    extra = next(c for c in command if c.startswith("extra_pretrain="))
    assert json.loads(extra.partition("=")[2]) == ["trainer=gpu", "trainer.val_check_interval=1000"]


@pytest.mark.parametrize("spec", ["electra", "electra:x", "electra:"])
def test_a_run_without_a_numeric_multiple_is_refused(spec):
    with pytest.raises(SystemExit, match="arm:multiple"):
        efficiency_pilot.parse_run(spec)


@pytest.mark.parametrize("seed", [6, 7, 8])
def test_the_replication_seeds_are_refused(tmp_path, seed):
    with pytest.raises(SystemExit, match="independent replication"):
        efficiency_pilot.main(["--root", str(tmp_path), "--runs", "mlm:1", "--seed", str(seed)])


def write_run(folder, margins: dict[int, float], baseline: float, finished: bool) -> None:
    writer = SummaryWriter(str(folder / "electra" / "seed20" / "pretrain" / "tensorboard"))  # where train.py logs
    for step in range(0, max(margins) + 1, 10):
        writer.add_scalar("train/loss", 1.0, step)
    for step, margin in margins.items():
        writer.add_scalar("val/own_below_unigram", margin, step)
        writer.add_scalar("val/own_unigram", baseline, step)
    writer.close()
    if finished:
        (folder / "electra" / "seed20" / "pretrain" / "summary.json").write_text("{}")


@pytest.mark.parametrize("finished", [True, False])
def test_the_gate_is_read_from_the_logged_margins_and_only_a_finished_run_clears_it(tmp_path, finished):
    pilot = efficiency_pilot.pilot_of(args_of(tmp_path), "electra", 16)
    write_run(pilot.root, {100: 0.004, 200: 0.02, 300: 0.05}, baseline=0.4, finished=finished)
    efficiency_pilot.read(pilot)
    assert pilot.shares == pytest.approx({100: 0.01, 200: 0.05, 300: 0.125})  # margin / baseline
    assert pilot.first_step_at(0.08) == 300 and pilot.first_step_at(0.2) is None
    assert pilot.steps == 300 and pilot.seconds_per_step is not None
    assert pilot.clears(0.08) is finished  # a run stopped at its wall limit clears nothing
    assert not pilot.clears(0.2)
    assert ("yes" if finished else "unfinished") in efficiency_pilot.table([pilot], 0.08)
