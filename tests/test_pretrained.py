"""Loading a pretraining checkpoint for fine-tuning: folders and files, what it brings, and errors that
name the mismatching keys."""

from dataclasses import asdict

import pytest
import torch

from armlm.models.backbone import ModelConfig, Transformer
from armlm.models.checkpoint import load_weights, resolve_checkpoint
from armlm.training.pretrained import load_pretrained
from tests.helpers.checkpoints import CONFIG, OBJECTIVES, save_checkpoint


@pytest.mark.parametrize("objective, attention", [("ar", "causal"), ("mlm", "bidirectional")])
def test_a_checkpoint_brings_config_tokenizer_and_attention_mode(tmp_path, objective, attention):
    path = save_checkpoint(tmp_path / "ckpt", objective)
    loaded = load_pretrained(path)
    assert loaded.objective_class.finetune_attention == attention and loaded.model == asdict(CONFIG)
    assert loaded.summary()["finetune_attention"] == attention
    assert loaded.tokenizer_json and loaded.objective_name in ("AutoregressiveLM", "MaskedLM")
    backbone = Transformer(ModelConfig(**loaded.model))
    load_weights(backbone, loaded.weights, path)
    original = torch.load(path, weights_only=True)["state_dict"]
    assert torch.equal(backbone.token_embedding.weight, original["model.token_embedding.weight"])


def test_a_run_folder_means_its_last_checkpoint(tmp_path):
    save_checkpoint(tmp_path / "run" / "checkpoints" / "last.ckpt")
    assert resolve_checkpoint(tmp_path / "run") == tmp_path / "run" / "checkpoints" / "last.ckpt"
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="without checkpoints/last.ckpt"):
        resolve_checkpoint(tmp_path / "empty")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        resolve_checkpoint(tmp_path / "nowhere.ckpt")


def test_mismatching_weights_name_the_keys(tmp_path):
    deeper = ModelConfig(**{**asdict(CONFIG), "n_layers": 3})
    with pytest.raises(ValueError, match=r"missing \['blocks\.2\.attn\.proj\.bias'"):
        load_weights(Transformer(deeper), load_pretrained(save_checkpoint(tmp_path / "a")).weights, "a")
    wider = ModelConfig(**{**asdict(CONFIG), "d_ff": 32})
    with pytest.raises(ValueError, match=r"blocks\.0\.mlp\.0\.weight \(16, 8\) vs \(32, 8\)"):
        load_weights(Transformer(wider), load_pretrained(save_checkpoint(tmp_path / "b")).weights, "b")


def test_foreign_and_unsafe_checkpoints_are_refused(tmp_path):
    odd = {**asdict(CONFIG), "n_experts": 4}
    with pytest.raises(ValueError, match=r"keys \['n_experts'\] are unknown"):
        load_pretrained(save_checkpoint(tmp_path / "a", hyper_parameters={"model": odd, "objective": OBJECTIVES["ar"]}))
    with pytest.raises(ValueError, match=r"lacks \['tokenizer_json'\]"):
        load_pretrained(save_checkpoint(tmp_path / "b", tokenizer_json=None))
    finetuned = {"model": asdict(CONFIG), "task": {"name": "rte"}}
    with pytest.raises(ValueError, match="not an armlm pretraining checkpoint"):
        load_pretrained(save_checkpoint(tmp_path / "c", hyper_parameters=finetuned))
    torch.save({"hyper_parameters": {"model": asdict(CONFIG)}, "evil": ModelConfig()}, tmp_path / "d")
    with pytest.raises(ValueError, match="weights_only=True"):
        load_pretrained(tmp_path / "d")
    (tmp_path / "e").write_text("not a checkpoint")
    with pytest.raises(ValueError, match="is not a checkpoint file"):
        load_pretrained(tmp_path / "e")


def test_an_objective_that_cannot_be_imported_or_is_not_one_is_named(tmp_path):
    for name, target, message in (("gone", "objectives.gone.VanishedLM", "cannot be imported"),
                                  ("other", "armlm.models.backbone.Transformer", "is not an armlm objective")):
        hparams = {"model": asdict(CONFIG), "objective": {"_target_": target}}
        with pytest.raises(ValueError, match=message):
            load_pretrained(save_checkpoint(tmp_path / name, hyper_parameters=hparams))
