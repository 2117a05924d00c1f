"""Continued pretraining (init_from=): the new run starts from exactly the parent's backbone, with a fresh
optimiser and schedule; its budget counts its own tokens and its lineage names every ancestor; a model or
vocabulary that differs from the parent's is refused, naming the key."""

import json

import pytest
import torch
import yaml

from armlm.training.run import run_pretraining
from tests.helpers.configs import tiny_config


@pytest.fixture(scope="module")
def parent(tmp_path_factory, cache_dir):
    out = tmp_path_factory.mktemp("parent-ar")
    run_pretraining(tiny_config(out, cache_dir, "objective=ar", "trainer.max_steps=4"))
    return out


def backbone(folder):
    state = torch.load(folder / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    return {k: v for k, v in state.items() if k.startswith("model.")}


@pytest.mark.slow
def test_a_continued_run_starts_from_the_parents_weights_and_records_the_chain(parent, tmp_path, cache_dir):
    # a learning rate of 1e-30 moves no fp32 weight (an update of ~1e-30 against weights of ~1e-2): the weights it
    # ends with are the ones it started from
    child = tmp_path / "child"
    summary = run_pretraining(tiny_config(child, cache_dir, "objective=mlm", f"init_from={parent}", "trainer.max_steps=2",
                                    "optim.lr=1e-30"))
    for key, value in backbone(parent).items():
        torch.testing.assert_close(backbone(child)[key], value, rtol=0, atol=0, msg=key)
    parent_tokens = json.loads((parent / "summary.json").read_text())["tokens_seen"]
    assert summary["tokens_seen"] == 2 * 8 * 32  # its own budget only
    assert [a["objective"] for a in summary["init_from"]] == ["armlm.objectives.ar.AutoregressiveLM"]
    assert summary["init_from"][0]["tokens"] == parent_tokens == 4 * 8 * 32
    assert summary["chain_tokens_seen"] == parent_tokens + summary["tokens_seen"]
    checkpoint = torch.load(child / "checkpoints" / "last.ckpt", weights_only=True)
    assert checkpoint["hyper_parameters"]["init_from"] == summary["init_from"]  # the checkpoint carries the chain
    [hparams_yaml] = (child / "tensorboard").rglob("hparams.yaml")  # and so does the TensorBoard run
    assert yaml.safe_load(hparams_yaml.read_text())["init_from"] == summary["init_from"]
    # a fresh optimiser and schedule: Adam's step counts and the scheduler's are the child's 2, not the parent's 4 + 2
    assert {int(state["step"]) for state in checkpoint["optimizer_states"][0]["state"].values()} == {2}
    assert checkpoint["lr_schedulers"][0]["last_epoch"] == 2
    # a grandchild's lineage lists both ancestors, oldest first; dropout is the new run's to choose
    grandchild = run_pretraining(tiny_config(tmp_path / "grandchild", cache_dir, "objective=ar", f"init_from={child}",
                                       "trainer.max_steps=1", "model.dropout=0.0"))
    assert [a["objective"] for a in grandchild["init_from"]] == ["armlm.objectives.ar.AutoregressiveLM",
                                                                 "armlm.objectives.mlm.MaskedLM"]
    assert grandchild["chain_tokens_seen"] == parent_tokens + 2 * 8 * 32 + 8 * 32


@pytest.mark.slow
@pytest.mark.parametrize("override,match", [("model.d_model=48", "model.d_model"),
                                            ("data.tokenizer.vocab_size=500", "vocabulary size: parent 600 vs run 500")])
def test_a_parent_with_another_model_or_vocabulary_is_refused(parent, tmp_path, cache_dir, override, match):
    with pytest.raises(ValueError, match=match):
        run_pretraining(tiny_config(tmp_path, cache_dir, "objective=mlm", f"init_from={parent}", override))
