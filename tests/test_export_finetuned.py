"""Export of fine-tuned checkpoints (interchange/): classification, regression and tagging heads load with the Auto
classes and their labels and give the fine-tuned module's logits on real sentences, sentence pairs and NER words,
with the ids and segment types fine-tuning's encoders give; fine-tunes the modelling file cannot express are
refused, naming what to do."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer
from transformers import AutoTokenizer

from armlm.datamodules.encoding import encode_pair, encode_words
from armlm.finetune.module import FinetuneModule
from armlm.finetune.static import StaticTagger
from armlm.interchange.export import AUTO_CLASSES, export_checkpoint
from armlm.interchange.parity import CHECK_SENTENCES, PARITY_TOLERANCE
from armlm.interchange.source import read_source
from armlm.models.backbone import ModelConfig
from tests.helpers.checkpoints import perturbed
from tests.helpers.lanes import fast_lane_keeps


def finetuned_checkpoint(folder: Path, tokenizer_json: str, name: str, kind: str, labels: tuple[str, ...],
                         settings: dict) -> Path:
    """A fine-tuning checkpoint as train.py task=... writes it, random weights."""
    vocab_size = Tokenizer.from_str(tokenizer_json).get_vocab_size()
    model = asdict(ModelConfig(vocab_size=vocab_size, d_model=32, n_layers=3, n_heads=2, d_ff=64, dropout=0.0))
    task = {"name": name, "kind": kind, "labels": list(labels), "eval_splits": ["validation"]}
    optim = {"lr": 1e-3, "weight_decay": 0.0, "betas": [0.9, 0.999], "eps": 1e-6, "warmup_ratio": 0.0}
    module = FinetuneModule(model=model, task=task, settings={"head_dropout": 0.1, "feature_layers": 2, **settings},
                            optim=optim, pretrained={"checkpoint": "outputs/mlm/x", "objective": "MaskedLM"})
    perturbed(module.backbone, seed=3)
    path = folder / "checkpoints" / "last.ckpt"
    path.parent.mkdir(parents=True)
    torch.save({"hyper_parameters": dict(module.hparams), "state_dict": module.state_dict(),
                "tokenizer_json": tokenizer_json}, path)
    return path


@pytest.mark.parametrize("name, kind, labels, settings", fast_lane_keeps([
    ("sst2", "classification", ("negative", "positive"), {"mode": "full", "attention": "bidirectional", "pooling": "first"}),
    ("mnli", "classification", ("entailment", "neutral", "contradiction"),
     {"mode": "full", "attention": "causal", "pooling": "last"}),
    ("stsb", "regression", (), {"mode": "features", "attention": "bidirectional", "pooling": "mean"}),
    ("conll2003", "tagging", ("O", "B-PER", "I-PER"), {"mode": "features", "attention": "bidirectional", "pooling": "first"}),
    ("conll2003", "tagging", ("O", "B-LOC"), {"mode": "full", "attention": "causal", "pooling": "first"}),
], every=3))
def test_finetuned_heads_export_with_their_labels(name, kind, labels, settings, tmp_path, tokenizer_json, sentences):
    ckpt = finetuned_checkpoint(tmp_path / "run", tokenizer_json, name, kind, labels, settings)
    result = export_checkpoint(ckpt, tmp_path / "hf")
    assert not result.native and result.ids_equal and result.parity.max_abs_logit_diff < PARITY_TOLERANCE
    tagging = kind == "tagging"
    auto = AUTO_CLASSES["ArmlmForTokenClassification" if tagging else "ArmlmForSequenceClassification"]
    hf = auto.from_pretrained(tmp_path / "hf", trust_remote_code=True).eval()
    assert hf.config.num_labels == max(len(labels), 1)
    if labels:
        assert [hf.config.id2label[i] for i in range(len(labels))] == list(labels)
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "hf", trust_remote_code=True)
    module = FinetuneModule(**torch.load(ckpt, weights_only=True)["hyper_parameters"])
    module.load_state_dict(torch.load(ckpt, weights_only=True)["state_dict"])
    for texts in (sentences[:1], sentences[:4], list(zip(sentences[:3], sentences[3:6]))):
        batch = tokenizer([t[0] for t in texts], [t[1] for t in texts], padding=True, return_tensors="pt") \
            if isinstance(texts[0], tuple) else tokenizer(texts, padding=True, return_tensors="pt")
        with torch.no_grad():
            ours, theirs = module.eval()(dict(batch)), hf(**batch).logits
        if tagging:
            ours, theirs = ours[batch["attention_mask"].bool()], theirs[batch["attention_mask"].bool()]
        assert (ours - theirs).abs().max() < PARITY_TOLERANCE
    # Pairs and NER words give the ids and segment types fine-tuning's encoders give.
    raw = Tokenizer.from_str(tokenizer_json)
    for a, b in zip(sentences[:3], [None, *sentences[3:5]]):
        ours = encode_pair(raw, a, b, 0, 128)
        theirs = tokenizer(a) if b is None else tokenizer(a, b)
        assert theirs["input_ids"] == ours.input_ids and theirs["token_type_ids"] == ours.token_type_ids
    words = sentences[0].split()
    ours = encode_words(raw, words, [0] * len(words), 128)
    assert tokenizer(words, is_split_into_words=True)["input_ids"] == ours.input_ids


def test_fine_tunes_the_modelling_file_cannot_express_are_refused_naming_what_to_do(tmp_path, tokenizer_json):
    mixed = finetuned_checkpoint(tmp_path / "mix", tokenizer_json, "conll2003", "tagging", ("O", "B-PER", "I-PER"),
                                 {"mode": "features", "attention": "bidirectional", "pooling": "first",
                                  "features": "scalar_mix"})
    with pytest.raises(ValueError, match="finetune.features=concat"):
        read_source(mixed)
    task = {"name": "conll2003", "kind": "tagging", "labels": ["O", "B-PER", "I-PER"], "eval_splits": ["validation"]}
    static = StaticTagger(task, words=3, dim=4, optim={}, vectors={"folder": "x", "method": "Word2VecMethod"})
    path = tmp_path / "static.ckpt"
    torch.save({"hyper_parameters": dict(static.hparams), "state_dict": static.state_dict(),
                "tokenizer_json": tokenizer_json}, path)
    with pytest.raises(ValueError, match="vectors.txt"):
        read_source(path)


def test_a_reader_fine_tuned_on_short_blocks_exports_checked_on_the_sentences_that_fit(tmp_path, tokenizer_json):
    """Its positions are cut to the 24 it was trained on; fine-tuning's encoder cuts each sentence there too, but the
    folder's tokenizer does not, so parity reads only the sentences that fit both (a traceback from the modelling
    file's position check until 5 December 2026)."""
    settings = {"mode": "full", "attention": "bidirectional", "pooling": "first"}
    ckpt = finetuned_checkpoint(tmp_path / "run", tokenizer_json, "sst2", "classification", ("negative", "positive"),
                                settings)
    saved = torch.load(ckpt, weights_only=True)
    saved["hyper_parameters"]["pretrained"] = {**saved["hyper_parameters"]["pretrained"], "trained_length": 24}
    torch.save(saved, ckpt)
    result = export_checkpoint(ckpt, tmp_path / "hf")
    assert result.ids_equal and result.parity.max_abs_logit_diff < PARITY_TOLERANCE
    assert 0 < result.parity.positions < len(CHECK_SENTENCES)  # some sentences fit, some were left out
