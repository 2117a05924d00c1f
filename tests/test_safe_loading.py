"""Checkpoints load with weights_only=True only, and a mismatched one is refused with every differing key."""

from __future__ import annotations

import pytest
import torch

from armlm.models.backbone import ModelConfig
from armlm.training.preflight import check_resumable
from armlm.training.run import run_pretraining
from tests.helpers.checkpoints import pretraining_checkpoint
from tests.helpers.configs import tiny_config


def test_resume_with_a_different_model_lists_the_differing_keys(tmp_path, cache_dir, tokenizer_json):
    first = pretraining_checkpoint(tmp_path / "a", tokenizer_json, "ar")  # as a tiny AR run writes it, untrained
    with pytest.raises(ValueError, match=r"model\.d_model: checkpoint 64 vs run 32.*objective\._target_"):
        run_pretraining(tiny_config(tmp_path / "b", cache_dir, "objective=mlm", "model.d_model=32",
                                    f"ckpt_path={first}"))
    assert not (tmp_path / "b").exists()  # refused before anything was written


class NotATensor:
    pass


def test_checkpoint_with_a_pickled_object_is_refused(tmp_path):
    path = tmp_path / "evil.ckpt"
    torch.save({"hyper_parameters": {"model": {}, "objective": {}}, "payload": NotATensor()}, path)
    with pytest.raises(ValueError, match="weights_only=True"):
        check_resumable(path, ModelConfig(), {})


def test_finetuning_from_a_checkpoint_with_a_pickled_object_is_refused(tmp_path):
    from armlm.training.pretrained import load_pretrained

    path = tmp_path / "evil.ckpt"
    torch.save({"hyper_parameters": {"model": {}, "objective": {}}, "payload": NotATensor()}, path)
    with pytest.raises(ValueError, match="weights_only"):
        load_pretrained(str(path))


def test_a_file_that_is_not_a_checkpoint_is_named_as_one(tmp_path):
    """A log file, or a checkpoint cut short, given as ckpt_path: said so, not torch's error about memory maps."""
    path = tmp_path / "train.log"
    path.write_text("[INFO] step 1\n")
    cut = tmp_path / "cut.ckpt"
    torch.save({"hyper_parameters": {"model": {}, "objective": {}}}, cut)
    cut.write_bytes(cut.read_bytes()[:100])
    for given in (path, cut):
        with pytest.raises(ValueError, match=r"is not a checkpoint file \(not the zip archive torch.save writes"):
            check_resumable(given, ModelConfig(), {})
