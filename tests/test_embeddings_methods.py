"""Each static method trains from its seed on a toy corpus; the vectors folder round-trips."""

import json
import re

import numpy as np
import pytest
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

from armlm.common.config import compose_config
from armlm.embeddings.methods import FastTextMethod, GloveMethod, PpmiSvd, Word2VecMethod
from armlm.embeddings.run import run_embeddings
from armlm.embeddings.store import load_vectors, save_vectors
from armlm.embeddings.words import WordSplitter
from armlm.finetune.static import word_table

SENTENCES = [["the", "cat", "sat", "on", "the", "mat"], ["the", "dog", "sat", "on", "the", "rug"],
             ["a", "cat", "and", "a", "dog", "ran"]] * 20


def tokenizer_json() -> str:
    tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return tokenizer.to_str()


@pytest.mark.parametrize("method", [
    PpmiSvd(dim=4, window=2, min_count=2), GloveMethod(dim=4, window=2, min_count=2, epochs=3),
    Word2VecMethod(skipgram=True, dim=4, window=2, min_count=2, epochs=2),
    Word2VecMethod(skipgram=False, dim=4, window=2, min_count=2, epochs=2),
    FastTextMethod(skipgram=True, dim=4, window=2, min_count=2, epochs=2),
], ids=lambda m: f"{m.name}{'-sg' if getattr(m, 'skipgram', False) else ''}")
def test_methods_give_every_frequent_word_a_vector_reproducibly_from_the_seed(method):
    first, again, other = (method.train(SENTENCES, seed) for seed in (1, 1, 2))
    assert set(first.key_to_index) == {"the", "cat", "sat", "on", "mat", "dog", "rug", "a", "and", "ran"}
    assert first.vector_size == 4
    assert np.array_equal(first.vectors, again.vectors)
    if not isinstance(method, PpmiSvd):  # the SVD is the same whatever the seed (only ARPACK's start moves)
        assert not np.allclose(first.vectors, other.vectors)


@pytest.mark.parametrize("method", [
    PpmiSvd(dim=3, window=2, min_count=3), GloveMethod(dim=3, window=2, min_count=3, epochs=1),
    Word2VecMethod(skipgram=True, dim=3, window=2, min_count=3, epochs=1),
    FastTextMethod(skipgram=True, dim=3, window=2, min_count=3, epochs=1),
], ids=lambda m: m.name)
def test_every_method_keeps_the_same_words_at_a_min_count(method):
    """Words seen once or twice fall under min_count=3 in every method, so the benchmarks score the same pairs."""
    sentences = SENTENCES + [["zebra", "sat"], ["yak", "ran"], ["yak", "sat"], ["newt", "ran"]] * 1 + [["newt"]] * 2
    kept = set(method.train(sentences, 1).key_to_index)
    assert kept == {"the", "cat", "sat", "on", "mat", "dog", "rug", "a", "and", "ran", "newt"}  # newt: 3 times


def test_settings_are_checked():
    with pytest.raises(ValueError, match="method.window"):
        PpmiSvd(window=0)


def test_fasttext_builds_vectors_for_unseen_words_and_word2vec_does_not():
    fasttext = FastTextMethod(skipgram=True, dim=4, window=2, min_count=2, epochs=1).train(SENTENCES, 1)
    word2vec = Word2VecMethod(skipgram=True, dim=4, window=2, min_count=2, epochs=1).train(SENTENCES, 1)
    assert "cats" not in fasttext.key_to_index and np.abs(fasttext["cats"]).sum() > 0
    with pytest.raises(KeyError):
        word2vec["cats"]


def test_vectors_folder_round_trips_and_maps_task_words_through_the_tokenizer(tmp_path):
    vectors = Word2VecMethod(skipgram=True, dim=4, window=2, min_count=2, epochs=1).train(SENTENCES, 1)
    save_vectors(tmp_path, vectors, tokenizer_json(), {"method": "Word2VecMethod", "seed": 1})
    loaded = load_vectors(tmp_path)
    assert np.array_equal(loaded.keyed["cat"], vectors["cat"]) and loaded.dim == 4
    assert json.loads((tmp_path / "summary.json").read_text())["seed"] == 1
    assert (tmp_path / "vectors.txt").read_text().splitlines()[0] == "10 4"  # word2vec text header
    assert not list(tmp_path.glob(".vectors-*"))  # nothing temporary left behind
    splitter = WordSplitter(tokenizer_json())
    assert np.allclose(loaded.word_vector("Cat", splitter), vectors["cat"])
    assert np.allclose(loaded.word_vector("cat-dog", splitter), (vectors["cat"] + vectors["dog"]) / 2)  # '-' has none
    assert loaded.word_vector("zebra", splitter) is None
    (tmp_path / "summary.json").unlink()
    with pytest.raises(FileNotFoundError, match="summary.json"):
        load_vectors(tmp_path)


def test_the_ner_table_standardises_every_dimension_over_the_vocabulary(tmp_path):
    vectors = Word2VecMethod(skipgram=True, dim=4, window=2, min_count=2, epochs=1).train(SENTENCES, 1)
    save_vectors(tmp_path, vectors, tokenizer_json(), {"method": "Word2VecMethod", "seed": 1})
    loaded = load_vectors(tmp_path)
    index, table = word_table(loaded, {"Cat", "cat-dog", "zebra"})
    mean, sd = vectors.vectors.mean(0), vectors.vectors.std(0)
    assert set(index) == {"Cat", "cat-dog"} and not table[0].any()  # zebra has no vector: row 0
    assert np.allclose(table[index["Cat"]], (vectors["cat"] - mean) / sd, atol=1e-5)
    both = ((vectors["cat"] - mean) / sd + (vectors["dog"] - mean) / sd) / 2
    assert np.allclose(table[index["cat-dog"]], both, atol=1e-5)
    whole = np.stack([(vectors[w] - mean) / sd for w in vectors.key_to_index])
    assert np.allclose(whole.mean(0), 0, atol=1e-5) and np.allclose(whole.std(0), 1, atol=1e-4)


@pytest.mark.parametrize("build,line", [
    (lambda: GloveMethod(lr=-0.5), "method.lr=-0.5: expected a number > 0"),
    (lambda: GloveMethod(epochs=0), "method.epochs=0: expected an integer >= 1"),
    (lambda: Word2VecMethod(skipgram=True, negative=0), "method.negative=0: expected an integer >= 1"),
    (lambda: Word2VecMethod(skipgram="yes"), "method.skipgram='yes': expected true or false"),
    (lambda: Word2VecMethod(skipgram=True, sample=-1), "method.sample=-1: expected a number >= 0"),
    (lambda: FastTextMethod(skipgram=True, min_n=4, max_n=3), "method.max_n=3: expected an integer >= method.min_n=4"),
    (lambda: PpmiSvd(context_smoothing=0), "method.context_smoothing=0: expected a number in (0, 1]"),
])
def test_a_setting_that_would_train_nothing_or_climb_the_loss_is_refused(build, line):
    """GloVe with lr=-1 ran to the end and scored its vectors (gradient ascent); word2vec with negative=0 and no
    hierarchical softmax has no output layer to train."""
    with pytest.raises(ValueError, match="^" + re.escape(line)):
        build()


@pytest.mark.parametrize("setting,line", [
    ("seed=abc", "seed='abc': expected an integer >= 0"),
    ("benchmarks.rare_below=x", "benchmarks.rare_below='x': expected an integer >= 1"),
    ("contextual.batch_size=0", "contextual.batch_size=0: expected an integer >= 1"),
    ("method.dim=0", "method.dim=0; give an integer >= 1"),
])
def test_the_commands_settings_are_one_line_before_any_data_is_read(setting, line, tmp_path):
    """seed=abc and rare_below=x ended in int()'s traceback, contextual.batch_size=0 in range()'s, and a method's own
    check (method.dim=0) came wrapped in Hydra's instantiation error."""
    with pytest.raises(ValueError, match="^" + re.escape(line)):
        run_embeddings(compose_config("embeddings", [f"output_dir={tmp_path}", setting]))
    assert not any(tmp_path.iterdir())
