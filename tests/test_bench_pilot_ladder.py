"""The pilot ladder's reading and its rule: the gate read from what a run logged (a brute-force share from the logged
margins), the pace over a run's launches, runs read back from an earlier reading's JSON, the budget rule, the figure."""

from __future__ import annotations

import json
from dataclasses import asdict, replace

import pytest
from torch.utils.tensorboard import SummaryWriter

import bench.pilot_ladder as pilot_ladder
from tests.helpers.pilots import ARMS, BARS, ladder, write_run


@pytest.mark.parametrize("finished", [True, False])
def test_the_gate_is_read_from_the_logged_margins_and_only_a_finished_run_clears_it(tmp_path, finished):
    pilot = pilot_ladder.Pilot("electra", 16, tmp_path / "x16-electra")
    write_run(pilot.root, {100: 0.004, 200: 0.02, 300: 0.05}, baseline=0.4, finished=finished)
    pilot_ladder.read(pilot)
    assert pilot.shares == pytest.approx({100: 0.01, 200: 0.05, 300: 0.125})  # margin / baseline
    assert pilot.first_step_at(0.08) == 300 and pilot.first_step_at(0.2) is None
    assert pilot.steps == 300 and pilot.seconds_per_step is not None
    assert pilot.clears(0.08) is finished  # a run stopped at its wall limit clears nothing
    assert not pilot.clears(0.2)
    assert pilot.precision == ("bf16-mixed" if finished else None)  # the summary's, once the run has one
    assert pilot_ladder.table([pilot], {}, 0.08).endswith(f"| {'yes | bf16-mixed' if finished else 'unfinished | -'} |")


def choose(pilots):
    return pilot_ladder.chosen_multiple(pilots, ARMS, BARS, 0.08, [1.0, 2.0, 4.0])


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
    assert pilot_ladder.chosen_multiple(pilots, ARMS, BARS, 0.08, [8.0])[0] == 8.0


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
    [pilot] = pilot_ladder.pilots_under(tmp_path)
    pilot_ladder.read(pilot)
    assert pilot.steps == 2000
    expected = (0.2 * 1000 + 30.0 + 0.3 * 1200 + 30.0) / (1000 + 1200)  # each launch's own clock, pauses included
    assert pilot.seconds_per_step == pytest.approx(expected, rel=1e-6)


SETTINGS = {"seed": 20, "study": "efficiency", "scale": "gutenwiki", "base_budget": 2.93e14}


def reading(**settings):
    return pilot_ladder.argparse.Namespace(**(SETTINGS | settings))


def saved_ladder(path, pilots, **settings) -> None:
    """What --out writes (the fields a reading keeps, and the settings it ran under)."""
    runs = [{**asdict(p), "root": str(p.root)} for p in pilots]
    path.write_text(json.dumps(SETTINGS | settings | {"gate": 0.08, "runs": runs}))


def test_runs_read_back_from_an_earlier_json_equal_their_first_reading(tmp_path):
    pilots = ladder(tmp_path / "logged", {("electra", 1): 0.077, ("electra", 4): 0.121, ("mlm", 4): None})
    saved_ladder(tmp_path / "a.json", pilots)
    recorded = pilot_ladder.pilots_recorded([tmp_path / "a.json"], reading())
    assert recorded == pilots  # steps, pace, shares (integer steps again), finished, all as first read


def test_a_run_in_two_files_takes_each_field_from_the_file_that_has_it_and_refuses_two_values(tmp_path):
    [run] = ladder(tmp_path / "logged", {("electra", 1): 0.077})
    saved_ladder(tmp_path / "read.json", [run])  # read from its logs: no command, no wall time
    launched = replace(run, command=["study.py", "arm=electra"], wall_seconds=1216.2)
    saved_ladder(tmp_path / "launched.json", [launched])
    for files in (["read.json", "launched.json"], ["launched.json", "read.json"]):
        [both] = pilot_ladder.pilots_recorded([tmp_path / f for f in files], reading())
        assert both.command == ["study.py", "arm=electra"] and both.wall_seconds == 1216.2 and both.shares == run.shares
    saved_ladder(tmp_path / "old_reader.json", [replace(run, seconds_per_step=1.571)])  # a pace counted otherwise
    with pytest.raises(SystemExit, match=r"electra at 1 x has seconds_per_step .* in .*read.json and 1.571 in "
                                         r".*old_reader.json; give only the file whose reading you keep"):
        pilot_ladder.pilots_recorded([tmp_path / "read.json", tmp_path / "old_reader.json"], reading())


def test_an_earlier_json_of_other_settings_or_of_another_shape_is_refused(tmp_path):
    saved_ladder(tmp_path / "seed21.json", ladder(tmp_path / "logged", {("electra", 1): 0.1}), seed=21)
    with pytest.raises(SystemExit, match="seed21.json holds seed, study, scale, base budget .21,.*give the same"):
        pilot_ladder.pilots_recorded([tmp_path / "seed21.json"], reading())
    (tmp_path / "bad.json").write_text(json.dumps(SETTINGS | {"runs": [{"arm": "electra"}]}))
    with pytest.raises(SystemExit, match="bad.json: not a pilot JSON written by --out"):
        pilot_ladder.pilots_recorded([tmp_path / "bad.json"], reading())


def test_the_ladder_figure_draws_each_rung_of_each_arm_against_its_bar(tmp_path):
    pilots = ladder(tmp_path, {("electra", 1): 0.077, ("electra", 2): 0.083, ("electra", 4): None, ("mlm", 4): 0.3})
    figure = pilot_ladder.ladder_figure(pilots, BARS, 0.08)
    panels = {ax.get_title(): ax for ax in figure.axes}
    assert sorted(panels) == ["electra (bar 0.1)", "mlm (bar 0.08)"]
    electra = panels["electra (bar 0.1)"]
    runs = [line for line in electra.get_lines() if line.get_label() and not line.get_label().startswith("_")]
    assert [line.get_label() for line in runs] == ["1 x", "2 x", "4 x (unfinished)"]
    assert [line.get_linestyle() for line in runs] == ["-", "-", ":"]
    assert list(runs[1].get_ydata()) == pytest.approx([0.0, 0.083])  # the run's shares at its validations
    bar = [line for line in electra.get_lines() if line.get_linestyle() == "--"]
    assert len(bar) == 1 and list(bar[0].get_ydata()) == [0.10, 0.10]
