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
    assert "++study.budget=4e+14" in command and "arm=electra" in command and "first_seed=20" in command
    assert "stages=[pretrain]" in command and f"root={tmp_path / 'x16-electra'}" in command
    extra = next(c for c in command if c.startswith("extra_pretrain="))
    assert json.loads(extra.partition("=")[2]) == ["trainer=gpu", "trainer.val_check_interval=1000"]


@pytest.mark.parametrize("spec", ["electra", "electra:x", "electra:"])
def test_a_run_without_a_numeric_multiple_is_refused(spec):
    with pytest.raises(SystemExit, match="arm:multiple"):
        efficiency_pilot.parse_arm(spec, ":", "--runs", "multiple", "electra:16")


@pytest.mark.parametrize("seed", [6, 7, 8])
def test_the_replication_seeds_are_refused(tmp_path, seed):
    with pytest.raises(SystemExit, match="independent replication"):
        efficiency_pilot.main(["--root", str(tmp_path), "--runs", "mlm:1", "--seed", str(seed)])


def write_run(folder, margins: dict[int, float], baseline: float, finished: bool, arm: str = "electra") -> None:
    run = folder / arm / "seed20" / "pretrain"
    writer = SummaryWriter(str(run / "tensorboard"))  # where train.py logs
    for step in range(0, max(margins) + 1, 10):
        writer.add_scalar("train/loss", 1.0, step)
    for step, margin in margins.items():
        writer.add_scalar("val/own_below_unigram", margin, step)
        writer.add_scalar("val/own_unigram", baseline, step)
    writer.close()
    if finished:
        (run / "summary.json").write_text("{}")


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
    assert ("yes" if finished else "unfinished") in efficiency_pilot.table([pilot], {}, 0.08)


ARMS = ["mlm", "replace_mlm", "electra_15", "all_tokens_mlm", "electra"]
BARS = {"electra": 0.10, "all_tokens_mlm": 0.10}


def ladder(tmp_path, ends: dict[tuple[str, float], float | None]) -> list:
    """Pilot folders whose runs end at the given share (baseline 1.0); None: the run stopped before its end."""
    for (arm, multiple), share in ends.items():
        folder = tmp_path / f"x{multiple:g}-{arm}"
        write_run(folder, {100: 0.0, 200: share if share is not None else 0.5}, 1.0, share is not None, arm)
        (tmp_path / f"{folder.name}.log").write_text("the run's output, beside its folder")
    pilots = efficiency_pilot.pilots_under(tmp_path)
    for pilot in pilots:
        efficiency_pilot.read(pilot)
    return pilots


def choose(pilots):
    return efficiency_pilot.chosen_multiple(pilots, ARMS, BARS, 0.08, [1.0, 2.0, 4.0])


def test_the_rule_passes_over_a_missed_rung_and_picks_the_first_where_every_arm_clears_its_bar(tmp_path):
    ends = {("electra", 1): 0.077, ("all_tokens_mlm", 1): 0.071}  # the CPU's 1 x: both under 0.10
    ends |= {(arm, 2): 0.12 for arm in ("electra", "all_tokens_mlm")} | {(arm, 2): 0.3 for arm in ARMS[:3]}
    pilots = ladder(tmp_path, ends)
    assert [(p.arm, p.multiple) for p in pilots][:2] == [("all_tokens_mlm", 1.0), ("electra", 1.0)]
    multiple, reason = choose(pilots)
    assert multiple == 2.0 and "1 x missed (all_tokens_mlm, electra)" in reason


@pytest.mark.parametrize("share", [0.095, None])
def test_the_choice_stays_open_until_every_arm_of_the_rung_has_finished(tmp_path, share):
    # ELECTRA at 0.095 clears the gate (0.08) but not its bar (0.10): the rung is missed, not chosen.
    ends = {("electra", 1): share, ("all_tokens_mlm", 1): 0.2, ("mlm", 1): 0.3}
    multiple, reason = choose(ladder(tmp_path, ends))
    assert multiple is None
    if share is None:  # ELECTRA stopped before its end: 1 x waits for it and for the two arms not run
        assert reason == "1 x open: waiting for replace_mlm, electra_15, electra"
    else:
        assert reason == "1 x missed (electra); 2 x open: waiting for " + ", ".join(ARMS)


def test_a_rung_outside_the_rule_is_shown_but_never_chosen(tmp_path):
    ends = {(arm, 8): 0.3 for arm in ARMS} | {("electra", 1): 0.01, ("electra", 2): 0.05, ("electra", 4): 0.07}
    pilots = ladder(tmp_path, ends)
    assert choose(pilots) == (None, "1 x missed (electra); 2 x missed (electra); 4 x missed (electra); no rung of "
                                    "the rule qualifies: it sets no budget")
    assert efficiency_pilot.chosen_multiple(pilots, ARMS, BARS, 0.08, [8.0])[0] == 8.0


def test_reading_the_root_alone_applies_the_rule_to_earlier_calls_runs(tmp_path, capsys):
    ladder(tmp_path, {(arm, 1): 0.3 for arm in ARMS} | {("electra", 1): 0.101})
    efficiency_pilot.main(["--root", str(tmp_path), "--out", str(tmp_path / "ladder.json")])
    assert "budget: 1 x = 2.93e+14 FLOPs (1 x: every arm clears its bar)" in capsys.readouterr().out
    saved = json.loads((tmp_path / "ladder.json").read_text())
    assert saved["chosen_multiple"] == 1.0 and len(saved["runs"]) == 5
    assert {r["arm"]: r["bar"] for r in saved["runs"]}["electra"] == 0.10
    with pytest.raises(SystemExit, match="not arms of study=efficiency"):
        efficiency_pilot.main(["--root", str(tmp_path), "--bar", "generator=0.1"])
    with pytest.raises(SystemExit, match=r"--bar takes arm=share \(e.g. electra=0.10\), got 'electra'"):
        efficiency_pilot.main(["--root", str(tmp_path), "--bar", "electra"])


def test_by_default_the_ladder_goes_on_to_4x_when_1x_and_2x_miss(tmp_path, capsys):
    # The CPU ladder of 28 November: both arms under their bar at 1 x, ELECTRA under it at 2 x (0.083).
    ladder(tmp_path, {("electra", 1): 0.077, ("all_tokens_mlm", 1): 0.071, ("electra", 2): 0.083})
    efficiency_pilot.main(["--root", str(tmp_path)])
    assert ("budget: none yet (1 x missed (all_tokens_mlm, electra); 2 x missed (electra); 4 x open: waiting for "
            + ", ".join(ARMS) + ")") in capsys.readouterr().out


def test_the_pace_counts_each_launch_and_never_the_time_between_a_stop_and_its_restart(tmp_path):
    # Launch one: steps 0-1,000 at 0.2 s a step with a 30-s validation pause (150 times a 10-step interval).
    # Launch two, an hour later, resumes from the step-800 checkpoint: steps 800-2,000 at 0.3 s a step.
    run = tmp_path / "x1-electra" / "electra" / "seed20" / "pretrain" / "tensorboard"
    launches = [(range(0, 1001, 10), 0.2, 1.8e9), (range(800, 2001, 10), 0.3, 1.8e9 + 3600 + 230)]
    for steps, per_step, start in launches:
        writer = SummaryWriter(str(run))
        for step in steps:
            pause = 30.0 if step > steps[0] + 500 else 0.0  # one validation pause in each launch
            writer.add_scalar("train/loss", 1.0, step, walltime=start + per_step * (step - steps[0]) + pause)
        writer.close()
    assert len(list(run.glob("events.out.tfevents.*"))) == 2
    [pilot] = efficiency_pilot.pilots_under(tmp_path)
    efficiency_pilot.read(pilot)
    assert pilot.steps == 2000
    expected = (0.2 * 1000 + 30.0 + 0.3 * 1200 + 30.0) / (1000 + 1200)  # each launch's own clock, pauses included
    assert pilot.seconds_per_step == pytest.approx(expected, rel=1e-6)


def test_the_ladder_figure_draws_each_rung_of_each_arm_against_its_bar(tmp_path):
    pilots = ladder(tmp_path, {("electra", 1): 0.077, ("electra", 2): 0.083, ("electra", 4): None, ("mlm", 4): 0.3})
    figure = efficiency_pilot.ladder_figure(pilots, BARS, 0.08)
    panels = {ax.get_title(): ax for ax in figure.axes}
    assert sorted(panels) == ["electra (bar 0.1)", "mlm (bar 0.08)"]
    electra = panels["electra (bar 0.1)"]
    runs = [line for line in electra.get_lines() if line.get_label() and not line.get_label().startswith("_")]
    assert [line.get_label() for line in runs] == ["1 x", "2 x", "4 x (unfinished)"]
    assert [line.get_linestyle() for line in runs] == ["-", "-", ":"]
    assert list(runs[1].get_ydata()) == pytest.approx([0.0, 0.083])  # the run's shares at its validations
    bar = [line for line in electra.get_lines() if line.get_linestyle() == "--"]
    assert len(bar) == 1 and list(bar[0].get_ydata()) == [0.10, 0.10]


def test_plot_writes_the_ladder_figure_as_a_png(tmp_path):
    ladder(tmp_path, {("electra", 1): 0.077, ("mlm", 1): 0.3})
    efficiency_pilot.main(["--root", str(tmp_path), "--plot", str(tmp_path / "out" / "ladder.png")])
    assert (tmp_path / "out" / "ladder.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
