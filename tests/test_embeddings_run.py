"""`armlm embeddings` end to end on the embedded corpus, and NER on its static vectors through train.py."""

import json
from pathlib import Path

import pytest
import torch

from armlm.embeddings.run import run_embeddings
from armlm.embeddings.store import load_vectors
from armlm.finetune.static import run_static_finetune
from armlm.training.pretrained import load_pretrained
from tests.helpers.configs import hydra_config

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def vectors_folder(tmp_path_factory, cache_dir) -> Path:
    """PPMI-SVD vectors of the embedded corpus, in the tokenizer of the tiny_pretrained runs (its cache is shared)."""
    out = tmp_path_factory.mktemp("ppmi")
    run_embeddings(hydra_config("embeddings", out, "method=ppmi_svd", "method.dim=50", f"data.cache_dir={cache_dir}",
                                "data.tokenizer.vocab_size=4000"))
    return out


def test_a_static_run_writes_loadable_vectors_and_benchmark_scores(vectors_folder):
    words = json.loads((vectors_folder / "words.json").read_text())
    scores = words["layers"]["static"]
    assert words["method"] == "PpmiSvd" and words["vocabulary"] > 1000
    assert 0 < scores["simlex999"]["coverage"] < 1 and scores["simlex999"]["pairs"] > 100
    assert scores["wordsim353"]["spearman"] > 0.1  # count vectors of 0.5M words already rank related pairs
    assert {"semantic", "syntactic", "overall", "sections"} <= scores["analogies"].keys()
    loaded = load_vectors(vectors_folder)
    assert loaded.dim == 50 and len(loaded.keyed.key_to_index) == words["vocabulary"]


def test_ner_on_static_vectors_fits_a_slice_through_the_fine_tuning_settings(tmp_path, vectors_folder, data_dir):
    """Train and validation are the same 300 sentences: a linear tagger on 50 numbers per word must find some
    entities it was shown (the whole pipeline works), not generalise."""
    blocks = (data_dir / "conll2003" / "eng.train").read_text().split("\n\n")[:301]  # -DOCSTART- + 300
    for name in ("eng.train", "eng.testa"):
        (tmp_path / name).write_text("\n\n".join(blocks) + "\n")
    cfg = hydra_config("finetune", tmp_path / "run", "task=conll2003", f"vectors={vectors_folder}",
                       f"task.data.source={tmp_path}", "task.epochs=15", "task.optim.features_lr=0.1",
                       "finetune.dropout=0", "trainer.enable_progress_bar=false", "trainer.precision=32-true",
                       "task.data.max_length=64")
    results = run_static_finetune(cfg)
    assert results["mode"] == "features" and results["features"] == "static, standardised per dimension"
    assert results["vectors"]["method"] == "PpmiSvd" and results["max_length"] == 64
    assert 0 < results["no_vector_share"]["train"] < 0.5  # names and numbers often lack a vector
    assert results["metrics"]["validation"]["f1"] > results["majority_baseline"]["validation"]["f1"]
    state = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=True)
    assert state["state_dict"]["table"].shape[1] == 50 and not state["state_dict"]["table"][0].any()
    with pytest.raises(ValueError, match="not both"):
        run_static_finetune(hydra_config("finetune", tmp_path, "task=conll2003", f"vectors={vectors_folder}",
                                         "pretrained=/some/run"))


def test_a_checkpoint_gives_one_row_per_layer(tmp_path, tiny_pretrained, cache_dir):
    cfg = hydra_config("embeddings", tmp_path, f"checkpoint={tiny_pretrained['ar']}", "contextual.max_contexts=2",
                       f"data.cache_dir={cache_dir}")
    summary = run_embeddings(cfg)
    assert summary["attention"] == "causal" and summary["objective"] == "AutoregressiveLM"
    n_layers = load_pretrained(tiny_pretrained["ar"]).model["n_layers"]
    assert list(summary["layers"]) == [str(k) for k in range(n_layers + 1)]  # the embedding layer, then blocks
    assert json.loads((tmp_path / "words.json").read_text())["vocabulary"] == summary["vocabulary"] > 1000
