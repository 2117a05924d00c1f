"""bench/document_context.py, the packing study's manipulation check: a run read across documents gives back its own
last validation, and masking the other documents of its blocks changes what it predicts."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

import bench.document_context as document_context
from armlm.common.provenance import armlm_commit
from armlm.training.run import run_pretraining
from tests.helpers.configs import tiny_config


@pytest.fixture(scope="module")
def tiny_ar_run(tmp_path_factory, cache_dir):
    """A tiny AR run on short documents (blocks of 32 tokens with boundaries inside), its config saved as Hydra does."""
    folder = tmp_path_factory.mktemp("document-context") / "ar"
    cfg = tiny_config(folder, cache_dir, "objective=ar", "data=enwiki_short")
    summary = run_pretraining(cfg)
    (folder / ".hydra").mkdir()
    OmegaConf.save(cfg, folder / ".hydra" / "config.yaml")
    return folder, summary


@pytest.mark.slow  # a tiny pretraining run (about 20 s on 2 cores)
def test_read_across_documents_a_run_gives_back_its_own_last_validation_and_the_mask_changes_it(tiny_ar_run):
    folder, summary = tiny_ar_run
    cfg = document_context.run_config(folder)
    across = document_context.held_out(folder, cfg, across=True, batches=2)  # as it trained: the same 2 batches
    within = document_context.held_out(folder, cfg, across=False, batches=2)
    assert across["val/loss"] == pytest.approx(summary["val_loss"], rel=1e-5)
    assert abs(within["val/loss"] - across["val/loss"]) > 1e-4  # the same targets, other attention


@pytest.mark.slow
def test_the_table_and_json_name_each_run_with_how_it_trained(tiny_ar_run, tmp_path, capsys):
    folder, _ = tiny_ar_run
    document_context.main([str(folder), "--batches", "1", "--out", str(tmp_path / "context.json")])
    assert f"| {folder} | across | " in capsys.readouterr().out
    saved = OmegaConf.load(tmp_path / "context.json")
    assert saved.batches == 1 and saved.runs[0].trained_across and set(saved.runs[0].within) == set(document_context.READ)
    assert saved.commit == armlm_commit()  # which code read the checkpoints, kept beside the figures


def test_a_folder_that_is_not_a_pretraining_run_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="no .hydra/config.yaml or checkpoints/last.ckpt; give a pretraining run"):
        document_context.main([str(tmp_path)])
