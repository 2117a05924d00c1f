"""studies/keeping.py: a study's finished units kept without weights or event files, and restored on a fresh
machine only whole, only where nothing of them ran there, with their curves reading as the live run's."""

import json
from pathlib import Path

import pytest
from torch.utils.tensorboard import SummaryWriter

import armlm.studies.keeping as records
import armlm.studies.run as study
from armlm.common.scalars import run_scalars
from armlm.studies.keeping import KEPT_FILE, record_finished, restore_recorded, units
from armlm.studies.plan import plan
from armlm.studies.runner import Outcome, check_record
from tests.helpers.configs import composed_config

REPO = Path(__file__).resolve().parents[1]


def findings_config(root: Path, *overrides: str, seeds: int = 1):
    return composed_config("study", ["study=arm_kinds", "scale=cpu", f"seeds={seeds}", *overrides], root=str(root))


def findings_stages(root: Path, seeds: int = 1):
    return plan(findings_config(root, seeds=seeds))


def finish(stage, steps: int = 3) -> None:
    """What a finished stage leaves: its done file, a checkpoint, event files, a log and its Hydra config."""
    (stage.folder / "checkpoints").mkdir(parents=True, exist_ok=True)
    (stage.folder / "checkpoints" / "last.ckpt").write_bytes(b"\0" * 1000)
    (stage.folder / "stage.json").write_text(json.dumps({**stage.record(), "launches": 2, "seconds": 61.5}))
    (stage.folder / "train.log").write_text("a log\n")
    (stage.folder / ".hydra").mkdir(exist_ok=True)
    (stage.folder / ".hydra" / "config.yaml").write_text(f"seed: {stage.seed}\n")
    (stage.folder / ".hydra" / "hydra.yaml").write_text(f"runtime: {{cwd: {stage.folder}}}\n")  # machine paths
    (stage.folder / "csv").mkdir(exist_ok=True)
    (stage.folder / "csv" / "metrics.csv").write_text("step,loss\n0,1.0\n")  # another logger's copy
    with SummaryWriter(str(stage.folder / "tensorboard")) as writer:
        for step in range(steps):
            writer.add_scalar("val/loss", 5.0 - step / 3, step)
            writer.add_scalar("train/tokens_seen", 2048.0 * (step + 1), step)
    stage.done_file.write_text(json.dumps({"stage": stage.name, "value": 0.123456789012345}))


def finished_unit(root: Path, arm: str = "ar"):
    """The findings plan of seed 1 under `root`, and `arm`'s unit in it with every stage finished."""
    stages = findings_stages(root)
    unit = next(unit for unit in units(stages) if unit[0].arm == arm)
    for stage in unit:
        finish(stage)
    return stages, unit


def test_a_unit_is_a_pretraining_run_and_every_stage_that_reads_it(tmp_path):
    stages = findings_stages(tmp_path, seeds=2)
    grouped = units(stages)
    members = [s for unit in grouped for s in unit]
    assert len(members) == len(stages) and set(members) == set(stages)  # a partition
    for unit in grouped:
        assert [s.kind for s in unit].count("pretrain") == 1 and unit[0].kind == "pretrain"
        assert len({s.seed for s in unit}) == 1  # seeds are independent replicates
    mlm = next(unit for unit in grouped if unit[0].arm == "mlm" and unit[0].seed == 1)
    # mlm_sentence diagnoses mlm's checkpoint in another context, so it is part of mlm's unit
    assert {s.arm for s in mlm} == {"mlm", "mlm_sentence"}
    assert {s.kind for s in mlm} == {"pretrain", "finetune", "diagnose", "zeroshot"}
    assert len(grouped) == 2 * 8  # 8 pretraining arms x 2 seeds


def test_a_finished_unit_is_kept_without_weights_or_logs_and_restored_on_a_fresh_machine(tmp_path):
    root, record, fresh = tmp_path / "machine1", tmp_path / "record", tmp_path / "machine2"
    stages, ar = finished_unit(root)
    assert record_finished(stages, root, record) == ["ar/seed1 pretrain"]
    kept = sorted(p.relative_to(record).as_posix() for p in record.rglob("*") if p.is_file())
    expected = []
    for s in ar:
        folder = s.folder.relative_to(root).as_posix()
        expected += [f"{folder}/{name}" for name in (".hydra/config.yaml", "scalars.csv", "stage.json", KEPT_FILE,
                                                     s.done_file.name)]
    assert kept == sorted(expected)  # no checkpoint, event file, log, other logger's copy or Hydra runtime
    entries = [json.loads((record / s.folder.relative_to(root) / KEPT_FILE).read_text()) for s in ar]
    assert {e["unit"] for e in entries} == {"ar/seed1 pretrain"} and len({e["recorded"] for e in entries}) == 1
    assert {"cores", "cpu", "bf16_units"} <= entries[0]["machine"].keys()
    assert record_finished(stages, root, record) == []  # kept once

    fresh_stages = findings_stages(fresh)  # another root: stage.json's paths differ
    restored = restore_recorded(fresh_stages, fresh, record)
    assert {s.name for s in restored} == {s.name for s in ar}
    for stage in (s for s in fresh_stages if s in restored):
        check_record(stage)  # the runner takes it as this study's own stage
        ran = json.loads((stage.folder / "stage.json").read_text())
        assert ran["launches"] == 2 and ran["seconds"] == 61.5  # how long it took, for the report
        assert stage.done_file.read_bytes() == (root / stage.done_file.relative_to(fresh)).read_bytes()
        assert not (stage.folder / "checkpoints").exists() and not (stage.folder / "train.log").exists()
    # the report's curves read the same from the restored table as from the live event files
    live, kept_table = run_scalars(root / "ar" / "seed1" / "pretrain"), run_scalars(fresh / "ar" / "seed1" / "pretrain")
    assert list(kept_table.columns) == list(live.columns) and (kept_table.index == live.index).all()
    assert (kept_table.to_numpy() == live.to_numpy()).all()
    assert restore_recorded(fresh_stages, fresh, record) == set()  # now it is there


def test_an_unfinished_unit_is_not_kept(tmp_path):
    root, record = tmp_path / "root", tmp_path / "record"
    stages = findings_stages(root)
    mlm = next(unit for unit in units(stages) if unit[0].arm == "mlm")
    for stage in mlm[:-1]:  # mlm_sentence's diagnosis (or the last stage) still to run
        finish(stage)
    assert record_finished(stages, root, record) == []
    assert not record.exists()
    finish(mlm[-1])
    assert record_finished(stages, root, record) == ["mlm/seed1 pretrain"]


@pytest.mark.parametrize("left_here", ["checkpoint", "done file", "a folder only"])
def test_a_unit_begun_here_or_kept_in_part_is_not_restored(tmp_path, left_here):
    root, record, fresh = tmp_path / "root", tmp_path / "record", tmp_path / "fresh"
    stages, ar = finished_unit(root)
    record_finished(stages, root, record)
    fresh_stages = findings_stages(fresh)
    fresh_ar = next(unit for unit in units(fresh_stages) if unit[0].arm == "ar")
    # this machine began the unit: a run killed before its first checkpoint leaves a folder and stage.json
    begun = {"checkpoint": fresh_ar[0].folder / "checkpoints", "done file": fresh_ar[-1].folder,
             "a folder only": fresh_ar[0].folder}[left_here]
    begun.mkdir(parents=True)
    if left_here == "done file":
        fresh_ar[-1].done_file.write_text("{}")
    assert restore_recorded(fresh_stages, fresh, record) == set()
    assert not fresh_ar[1].done_file.exists()

    (record / fresh_ar[-1].folder.relative_to(fresh) / KEPT_FILE).unlink()  # a recording cut short
    other = tmp_path / "other"
    assert restore_recorded(findings_stages(other), other, record) == set() and not other.exists()


def test_a_unit_kept_in_part_is_kept_again_whole_from_one_run(tmp_path):
    root, record = tmp_path / "root", tmp_path / "record"
    stages = findings_stages(root)
    mlm = next(unit for unit in units(stages) if unit[0].arm == "mlm")
    alone = [s for s in mlm if s.arm == "mlm"]  # an older record, made from a selection's part of the unit
    for stage in alone:
        finish(stage)
    assert record_finished(alone, root, record) == ["mlm/seed1 pretrain"]
    # the machine is lost before mlm_sentence ran; the next one reruns the whole unit, which now differs
    for stage in mlm:
        finish(stage)
        stage.done_file.write_text(json.dumps({"stage": stage.name, "run": 2}))
    assert record_finished(stages, root, record) == ["mlm/seed1 pretrain"]
    for stage in mlm:
        assert json.loads((record / stage.done_file.relative_to(root)).read_text())["run"] == 2


@pytest.mark.slow
def test_an_arm_selection_keeps_and_restores_only_whole_units_of_the_plan(tmp_path, monkeypatch):
    """`armlm study` with arm=: mlm alone is not its unit (mlm_sentence reads its checkpoint), so it is kept only
    once mlm_sentence has run too, and a fresh machine's arm=mlm_sentence restores the unit whole."""
    record = tmp_path / "record"

    def run_stages(stages, prefix, dry_run=False, on_done=None, launcher="process", allow_unlearned=False):
        outcomes = []
        for stage in stages:
            if not stage.done_file.is_file():
                finish(stage)
                on_done(stage)
            outcomes.append(Outcome(stage, "done"))
        return outcomes

    monkeypatch.setattr(study, "run_stages", run_stages)
    root = tmp_path / "root"
    study.run_study(findings_config(root, "arm=mlm", f"record={record}"))
    assert not record.exists()
    study.run_study(findings_config(root, "arm=mlm_sentence", f"record={record}"))
    kept = {p.parent.relative_to(record).as_posix() for p in record.rglob(KEPT_FILE)}
    assert "mlm/seed1/pretrain" in kept and "mlm_sentence/seed1/diagnostics" in kept

    fresh = tmp_path / "fresh"
    outcomes = study.run_study(findings_config(fresh, "arm=mlm_sentence", f"record={record}"))
    assert [o.status for o in outcomes] == ["restored"]
    assert (fresh / "mlm" / "seed1" / "pretrain" / "summary.json").is_file()  # the whole unit came back


def test_a_launch_of_some_kinds_of_stage_keeps_and_restores_those(tmp_path, monkeypatch):
    """Seeds run for a fine-tuning finding alone ('stages=[pretrain,finetune]') are kept without the diagnostics and
    zero-shot scores they never get, and come back on a fresh machine with the same command."""
    record, selection = tmp_path / "record", ("study=findings", "arm=ar", "stages=[pretrain,finetune]", "first_seed=9")

    def run_stages(stages, prefix, dry_run=False, on_done=None, launcher="process", allow_unlearned=False):
        for stage in stages:
            finish(stage)
            on_done(stage)
        return [Outcome(stage, "done") for stage in stages]

    monkeypatch.setattr(study, "run_stages", run_stages)
    study.run_study(findings_config(tmp_path / "root", *selection, f"record={record}"))
    kept = sorted(p.parent.relative_to(record).as_posix() for p in record.rglob(KEPT_FILE))
    assert kept == ["ar/seed9/finetune/conll2003-bidirectional", "ar/seed9/finetune/conll2003-full", "ar/seed9/pretrain"]
    monkeypatch.setattr(study, "run_stages", lambda stages, *a, **k: [Outcome(s, "done") for s in stages])
    outcomes = study.run_study(findings_config(tmp_path / "fresh", *selection, f"record={record}"))
    assert [o.status for o in outcomes] == ["restored"] * 3
    assert (tmp_path / "fresh" / "ar" / "seed9" / "finetune" / "conll2003-full" / "results.json").is_file()


def test_a_restore_cut_short_never_leaves_a_done_file(tmp_path, monkeypatch):
    root, record, fresh = tmp_path / "root", tmp_path / "record", tmp_path / "fresh"
    stages, _ = finished_unit(root)
    record_finished(stages, root, record)
    written = []
    real = records.atomic_file

    def failing(path, mode="w"):
        if len(written) == 6:
            raise OSError("No space left on device")
        written.append(Path(path))
        return real(path, mode)

    monkeypatch.setattr(records, "atomic_file", failing)
    with pytest.raises(OSError):
        restore_recorded(findings_stages(fresh), fresh, record)
    # every stage's results.json sorts before its stage.json and scalars.csv: order alone would not do this
    assert written and not [p for p in fresh.rglob("*") if p.name in {"summary.json", "results.json",
                                                                     "diagnostics.json", "zeroshot.json"}]


@pytest.mark.slow
def test_a_required_file_too_large_stops_the_recording_and_an_optional_one_is_left_out(tmp_path, monkeypatch):
    root, record = tmp_path / "root", tmp_path / "record"
    stages, ar = finished_unit(root)
    monkeypatch.setattr(records, "MAX_KEPT_BYTES", 1_000)
    (ar[1].folder / "predictions.csv").write_text("x\n" * 1_000)
    assert record_finished(stages, root, record) == ["ar/seed1 pretrain"]
    assert not (record / ar[1].folder.relative_to(root) / "predictions.csv").exists()
    ar[0].done_file.write_text(json.dumps({"padding": "x" * 2_000}))  # required files have their own, larger limit
    for stage in ar:
        (record / stage.folder.relative_to(root) / KEPT_FILE).unlink()
    assert record_finished(stages, root, record) == ["ar/seed1 pretrain"]
    monkeypatch.setattr(records, "MAX_REQUIRED_BYTES", 1_000)
    for stage in ar:
        (record / stage.folder.relative_to(root) / KEPT_FILE).unlink()
    with pytest.raises(ValueError, match="nothing of its unit was kept"):
        record_finished(stages, root, record)
    assert not list(record.rglob(KEPT_FILE))


def test_a_broken_kept_file_names_the_fix(tmp_path):
    root, record = tmp_path / "root", tmp_path / "record"
    stages, ar = finished_unit(root)
    record_finished(stages, root, record)
    (record / ar[0].folder.relative_to(root) / KEPT_FILE).write_text("{not json")
    with pytest.raises(ValueError, match="git checkout"):
        restore_recorded(findings_stages(tmp_path / "fresh"), tmp_path / "fresh", record)


@pytest.mark.slow
def test_report_only_restores_the_record_and_reports_without_running_a_stage(tmp_path, monkeypatch):
    root, record, fresh = tmp_path / "root", tmp_path / "record", tmp_path / "fresh"
    stages = findings_stages(root)
    for unit in units(stages)[:2]:
        for stage in unit:
            finish(stage)
    record_finished(stages, root, record)
    reported = []
    monkeypatch.setattr(study, "run_stages", lambda *a, **k: pytest.fail("report=only ran stages"))
    monkeypatch.setattr(study, "write_study_report", lambda cfg, where, spec: reported.append(
        sorted(p.parent.relative_to(where).as_posix() for p in where.rglob("summary.json"))))
    assert study.run_study(findings_config(fresh, "report=only", f"record={record}")) == []
    assert reported == [["ar/seed1/pretrain", "mlm/seed1/pretrain"]]  # restored before the report was written
    with pytest.raises(ValueError, match="report='sometimes'"):
        study.run_study(findings_config(fresh, "report=sometimes"))


@pytest.mark.parametrize("dry_run", [False, True])
def test_a_record_that_is_a_file_is_refused_before_any_stage(tmp_path, dry_run):
    """It was taken, each unit warned that it could not be kept, and the whole study ran unrecorded (probed on 5
    December: a smoke study's every stage ran before its user could see why)."""
    record = tmp_path / "notes.txt"
    record.write_text("")
    root = tmp_path / "root"
    with pytest.raises(ValueError, match=r"record=.*notes.txt is a file; give a folder"):
        study.run_study(findings_config(root, f"record={record}", f"dry_run={str(dry_run).lower()}"))
    assert not root.exists() and record.read_text() == ""
