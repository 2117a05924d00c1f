"""Fine-tuning a Hugging Face model (finetune/ on sources/): texts are laid out as the model's own tokenizer lays them
out, a decoder fine-tunes causally or with its causal mask removed, an attention the model cannot run is refused,
a fine-tuned checkpoint loads back, and an armlm checkpoint and its export read a padded batch alike under both
attentions."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

from armlm.datamodules.encoding import encode_pair, encode_words
from armlm.finetune.module import FinetuneModule
from armlm.finetune.run import resolve_settings, run_finetune
from armlm.interchange.export import export_checkpoint
from armlm.models.attention import BIDIRECTIONAL, CAUSAL
from armlm.sources import open_source
from armlm.sources.hf_backbone import switched_attention
from tests.helpers.configs import QUICK, composed_config

WORDS = ["The", "cat", "sat", "on", "Mats", "mat", "."]


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.mark.parametrize("family", ["bert", "roberta", "gpt2"])
def test_texts_are_laid_out_as_the_models_own_tokenizer_lays_them_out(hf_models, family):
    source = open_source(hf_models[family])
    frame = source.special.task_frame()
    theirs = AutoTokenizer.from_pretrained(hf_models[family])
    bos = [] if source.reading.finetune_attention == "bidirectional" else [theirs.bos_token_id]  # GPT-2 adds none
    pair = encode_pair(source.tokenizer, "The cat sat.", "A dog ran.", 1, 64, frame)
    want = theirs("The cat sat.", "A dog ran.", return_token_type_ids=True)
    assert pair.input_ids == bos + want["input_ids"]
    segments = want["token_type_ids"] if family == "bert" else [0] * len(want["input_ids"])  # one segment row
    assert pair.token_type_ids == [0] * len(bos) + segments
    words = encode_words(source.tokenizer, WORDS, list(range(len(WORDS))), 64, "first", frame)
    assert words.input_ids == bos + theirs(" ".join(WORDS))["input_ids"]  # a word's pieces as in running text
    assert [w for w in words.word_ids if w is not None] == sorted(w for w in words.word_ids if w is not None)


def finetune(out: Path, folder: Path, data_dir: Path, *overrides: str) -> dict:
    cfg = composed_config("finetune", [*QUICK, "task=conll2003", f"pretrained={folder}",
                                       f"task.data.source={data_dir / 'conll2003'}", "task.data.max_train_examples=48",
                                       "task.data.max_eval_examples=24", "task.epochs=1", "task.data.max_length=64",
                                       *overrides],
                          output_dir=str(out))
    return run_finetune(cfg)


@pytest.mark.slow
@pytest.mark.parametrize("family,attention,read_at", [("bert", "pretrained", "first"), ("gpt2", "pretrained", "last"),
                                                      ("gpt2", "bidirectional", "first")])
def test_a_hugging_face_model_fine_tunes_on_conll_in_either_attention(hf_models, family, attention, read_at, tmp_path,
                                                                      data_dir):
    results = finetune(tmp_path, hf_models[family], data_dir, f"finetune.attention={attention}")
    want = {"bert": "bidirectional", "gpt2": "causal"}[family] if attention == "pretrained" else attention
    assert results["attention"] == want and results["word_subword"] == read_at
    assert results["pretrained"]["source"] == "huggingface" and results["input_mask_share"] == 0.0
    counts = np.asarray(json.loads((tmp_path / "items.json").read_text())["splits"]["validation"]["entities"][-1])
    tp, fp, fn = counts.sum(axis=0)  # micro F1 recomputed from each dev sentence's counts: the metric's oracle
    assert len(counts) == results["examples"]["validation"] == 24
    assert results["metrics"]["validation"]["f1"] == pytest.approx(2 * tp / max(1, 2 * tp + fp + fn), abs=1e-6)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["objective"] == results["objective"]
    module = FinetuneModule.load_from_checkpoint(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    trained = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    assert all(torch.equal(module.state_dict()[k], v) for k, v in trained.items())


def test_an_attention_the_model_cannot_run_is_refused(hf_models, monkeypatch):
    source = open_source(hf_models["gpt2"])
    # a model that ignores a 4D mask: its attention cannot be switched, and the probe says so
    monkeypatch.setattr(type(source.backbone), "_mask", lambda self, attention, ids, mask: mask)
    assert switched_attention(source.backbone, source.special.start) == ("causal",)
    with pytest.raises(ValueError, match="attends causal only"):
        source.backbone(torch.tensor([[0, 5, 6]]), attention=BIDIRECTIONAL)
    fixed = type(source)(**{**source.__dict__, "reading": type(source.reading)(
        **{**source.reading.__dict__, "attentions": ("causal",)})})
    cfg = composed_config("finetune", ["task=conll2003", "finetune.attention=bidirectional"]).finetune
    with pytest.raises(ValueError, match="finetune.attention=bidirectional needs bidirectional attention"):
        resolve_settings(cfg, fixed)


def test_an_armlm_checkpoint_and_its_export_read_a_padded_batch_alike_in_both_attentions(untrained, tmp_path):
    export_checkpoint(untrained["ar"], tmp_path / "hf", format="native")
    ours, theirs = open_source(untrained["ar"]), open_source(tmp_path / "hf")
    assert theirs.reading.attentions == ("causal", "bidirectional")
    ids = torch.tensor([[ours.special.start, 40, 41, 42, 43, 44], [ours.special.start, 50, 51, 52, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])
    for attention in (CAUSAL, BIDIRECTIONAL):
        with torch.no_grad():
            a = ours.backbone(ids, attention=attention, attention_mask=mask)
            b = theirs.backbone(ids, attention=attention, attention_mask=mask)
        assert (a - b)[mask.bool()].abs().max() < 1e-5, attention.kind


@pytest.mark.slow
def test_a_checkpoint_fine_tuned_from_a_hugging_face_model_is_not_exported(hf_models, tmp_path, data_dir):
    finetune(tmp_path / "run", hf_models["bert"], data_dir, "trainer.max_steps=1")
    with pytest.raises(ValueError, match="fine-tuned the transformers model .* which export does not rewrite"):
        export_checkpoint(tmp_path / "run" / "checkpoints" / "last.ckpt", tmp_path / "hf")
    assert not (tmp_path / "hf").exists()


@pytest.mark.slow
def test_a_hugging_face_model_fine_tunes_on_a_glue_pair_task(hf_models, tmp_path, data_dir):
    root = tmp_path / "glue"
    (root / "RTE").mkdir(parents=True)
    lines = (data_dir / "glue" / "RTE" / "train.tsv").read_text(encoding="utf-8").splitlines()[:33]
    for split in ("train", "dev"):
        (root / "RTE" / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    cfg = composed_config("finetune", [*QUICK, "task=rte", f"pretrained={hf_models['roberta']}",
                                       f"task.data.source={root}", "task.epochs=1", "task.data.max_length=64"],
                          output_dir=str(tmp_path / "run"))
    results = run_finetune(cfg)
    assert results["task"] == "rte" and results["pooling"] == "first" and results["examples"]["train"] == 32
    accuracy = results["metrics"]["dev"]["accuracy"]  # over the 32 dev pairs: a whole number of them
    assert results["examples"]["dev"] == 32 and accuracy * 32 == pytest.approx(round(accuracy * 32), abs=1e-4)


@pytest.mark.slow
def test_each_model_is_loaded_once_to_fine_tune_it(hf_models, tiny_pretrained, tmp_path, data_dir, monkeypatch):
    """A transformers model is read from its folder once (the source's), an armlm backbone built once and trained at
    the fine-tuning dropout; neither switches on the source's kind (tests/test_layers.py)."""
    from transformers import AutoModelForCausalLM

    from armlm.models.backbone import Transformer

    loads, builds = [], []
    load = AutoModelForCausalLM.from_pretrained.__func__
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained",
                        classmethod(lambda cls, *a, **k: loads.append(a) or load(cls, *a, **k)))
    finetune(tmp_path / "hf", hf_models["gpt2"], data_dir)
    assert len(loads) == 1
    build = Transformer.__init__
    monkeypatch.setattr(Transformer, "__init__", lambda self, cfg: builds.append(cfg) or build(self, cfg))
    results = finetune(tmp_path / "armlm", tiny_pretrained["mlm"], data_dir, "finetune.dropout=0.3")
    assert len(builds) == 1 and results["pretrained"]["source"] == "armlm"
    module = FinetuneModule.load_from_checkpoint(tmp_path / "armlm" / "checkpoints" / "last.ckpt", weights_only=True)
    assert module.hparams["model"]["dropout"] == 0.3 and module.backbone.config.dropout == 0.3
    assert {m.p for m in module.backbone.modules() if isinstance(m, torch.nn.Dropout)} == {0.3}
