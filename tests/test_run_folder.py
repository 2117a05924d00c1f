"""training.run_folder: the run folder a command writes into (ckpt_path=last resumes it; a fresh run never writes over
another)."""

from __future__ import annotations

import re

import pytest
from lightning.pytorch.plugins.environments import SLURMEnvironment
from omegaconf import OmegaConf

from armlm.common.errors import ArmlmError
from armlm.finetune.command import finetune
from armlm.training.run import pretrain
from armlm.training.run_folder import refuse_writing_over_a_run, resolve_last_checkpoint
from tests.helpers.configs import composed_config


def test_a_fresh_run_is_refused_where_another_left_its_last_checkpoint_and_the_folder_is_kept(tmp_path, monkeypatch):
    """A second `armlm train ... hydra.run.dir=<a finished run>` trained afresh over it, with a warning, and wrote over
    its last.ckpt and summary.json (probed on 5 December). Now it stops before any work, naming both ways on; a
    resume, a folder with no last.ckpt (Lightning numbers a second best-*.ckpt) and a SLURM requeue go on."""
    cfg = OmegaConf.create({"output_dir": str(tmp_path), "ckpt_path": None})
    refuse_writing_over_a_run(cfg)
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "best-step8.ckpt").write_bytes(b"best")
    refuse_writing_over_a_run(cfg)
    (tmp_path / "checkpoints" / "last.ckpt").write_bytes(b"last")
    (tmp_path / "summary.json").write_text("{}")
    for command in ("train", "finetune"):
        composed = composed_config(command, [f"output_dir={tmp_path}", *(["task=rte", "pretrained=/a/run"]
                                                                          if command == "finetune" else [])])
        with pytest.raises(ArmlmError, match=rf"^{re.escape(str(tmp_path))} already holds a run \(checkpoints/last.ckpt\).*resume "
                                             r"it with ckpt_path=last, or give this run a folder of its own"):
            {"train": pretrain, "finetune": finetune}[command](composed)
    assert (tmp_path / "checkpoints" / "last.ckpt").read_bytes() == b"last"
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["best-step8.ckpt", "checkpoints", "last.ckpt", "summary.json"]
    resumed = OmegaConf.create({"output_dir": str(tmp_path), "ckpt_path": "last"})
    resolve_last_checkpoint(resumed)
    refuse_writing_over_a_run(resumed)
    assert resumed.ckpt_path == str(tmp_path / "checkpoints" / "last.ckpt")
    (tmp_path / "hpc_ckpt_1.ckpt").write_bytes(b"requeued")  # resumed by Lightning itself under SLURM only
    with pytest.raises(ArmlmError, match="already holds a run"):
        refuse_writing_over_a_run(cfg)
    monkeypatch.setattr(SLURMEnvironment, "detect", staticmethod(lambda: True))
    refuse_writing_over_a_run(cfg)
