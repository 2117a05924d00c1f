"""studies/records.py: a study's finished units kept without weights or event files, and restored on a fresh
machine only whole, only where nothing of them ran there, with their curves reading as the live run's."""

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from torch.utils.tensorboard import SummaryWriter

import studies.records as records
from analysis.runs import scalars
from studies.plan import plan
from studies.records import UNITS_FILE, copy_stage, record_finished, restore_recorded, units

REPO = Path(__file__).resolve().parents[1]


def findings_stages(root: Path, seeds: int = 1):
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base="1.3"):
        cfg = compose("study", overrides=["study=findings", "scale=cpu", f"seeds={seeds}", f"root={root}"])
    return plan(cfg)


def finish(stage, steps: int = 3) -> None:
    """What a finished stage leaves: its done file, a checkpoint, event files, a log and its Hydra config."""
    (stage.folder / "checkpoints").mkdir(parents=True, exist_ok=True)
    (stage.folder / "checkpoints" / "last.ckpt").write_bytes(b"\0" * 1000)
    (stage.folder / "stage.json").write_text(json.dumps(stage.record()))
    (stage.folder / "train.log").write_text("a log\n")
    (stage.folder / ".hydra").mkdir(exist_ok=True)
    (stage.folder / ".hydra" / "config.yaml").write_text(f"seed: {stage.seed}\n")
    with SummaryWriter(str(stage.folder / "tensorboard")) as writer:
        for step in range(steps):
            writer.add_scalar("val/loss", 5.0 - step / 3, step)
            writer.add_scalar("train/tokens_seen", 2048.0 * (step + 1), step)
    stage.done_file.write_text(json.dumps({"stage": stage.name, "value": 0.123456789012345}))


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


def test_a_finished_unit_is_kept_without_weights_or_event_files_and_restored_on_a_fresh_machine(tmp_path):
    root, record, fresh = tmp_path / "machine1", tmp_path / "record", tmp_path / "machine2"
    stages = findings_stages(root)
    ar = next(unit for unit in units(stages) if unit[0].arm == "ar")
    for stage in ar:
        finish(stage)
    assert record_finished(stages, root, record) == ["ar/seed1 pretrain"]
    kept = sorted(p.relative_to(record).as_posix() for p in record.rglob("*") if p.is_file())
    assert kept == sorted([UNITS_FILE, "ar/seed1/pretrain/.hydra/config.yaml", "ar/seed1/pretrain/scalars.csv",
                           "ar/seed1/pretrain/stage.json", "ar/seed1/pretrain/summary.json",
                           *[f"ar/seed1/{s.folder.relative_to(root / 'ar' / 'seed1').as_posix()}/{name}"
                             for s in ar[1:] for name in (".hydra/config.yaml", "scalars.csv", "stage.json",
                                                          s.done_file.name)]])
    index = json.loads((record / UNITS_FILE).read_text())
    assert set(index) == {s.folder.relative_to(root).as_posix() for s in ar}
    assert {e["unit"] for e in index.values()} == {"ar/seed1 pretrain"}
    assert record_finished(stages, root, record) == []  # kept once

    fresh_stages = findings_stages(fresh)
    restored = restore_recorded(fresh_stages, fresh, record)
    assert {s.name for s in restored} == {s.name for s in ar}
    for stage in ar:
        there = fresh / stage.folder.relative_to(root)
        assert there.joinpath(stage.done_file.name).read_bytes() == stage.done_file.read_bytes()
        assert not (there / "checkpoints").exists() and not (there / "train.log").exists()
    # the report's curves read the same from the restored table as from the live event files
    live, kept_table = scalars(root / "ar" / "seed1" / "pretrain"), scalars(fresh / "ar" / "seed1" / "pretrain")
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


def test_a_unit_partly_run_here_or_partly_recorded_is_not_restored(tmp_path):
    root, record, fresh = tmp_path / "root", tmp_path / "record", tmp_path / "fresh"
    stages = findings_stages(root)
    ar = next(unit for unit in units(stages) if unit[0].arm == "ar")
    for stage in ar:
        finish(stage)
    record_finished(stages, root, record)
    fresh_stages = findings_stages(fresh)
    fresh_ar = next(unit for unit in units(fresh_stages) if unit[0].arm == "ar")
    # this machine has the unit's pretraining under way (a checkpoint, no summary yet): its own run stands
    (fresh_ar[0].folder / "checkpoints").mkdir(parents=True)
    assert restore_recorded(fresh_stages, fresh, record) == set()
    assert not fresh_ar[1].done_file.exists()

    index = json.loads((record / UNITS_FILE).read_text())
    del index[fresh_ar[-1].folder.relative_to(fresh).as_posix()]
    (record / UNITS_FILE).write_text(json.dumps(index))
    other = tmp_path / "other"
    assert restore_recorded(findings_stages(other), other, record) == set()


def test_a_copy_cut_short_never_leaves_a_done_file(tmp_path, monkeypatch):
    root = tmp_path / "root"
    stage = findings_stages(root)[0]
    finish(stage)
    written = []
    real = records.atomic_file

    def failing(path, mode="w"):
        if len(written) == 2:
            raise OSError("No space left on device")
        written.append(Path(path).name)
        return real(path, mode)

    monkeypatch.setattr(records, "atomic_file", failing)
    with pytest.raises(OSError):
        copy_stage(stage, stage.folder, tmp_path / "copy")
    assert stage.done_file.name not in written and not (tmp_path / "copy" / stage.done_file.name).exists()


def test_a_broken_index_names_the_fix(tmp_path):
    (tmp_path / UNITS_FILE).write_text("{not json")
    with pytest.raises(ValueError, match="git checkout"):
        restore_recorded([], tmp_path / "root", tmp_path)


def test_a_unit_kept_in_part_is_kept_again_whole_from_one_run(tmp_path):
    root, record = tmp_path / "root", tmp_path / "record"
    stages = findings_stages(root)
    mlm = next(unit for unit in units(stages) if unit[0].arm == "mlm")
    alone = [s for s in mlm if s.arm == "mlm"]  # what `arm=mlm` plans: mlm_sentence's diagnosis is not in it
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
