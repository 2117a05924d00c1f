"""Word benchmarks on hand-built embeddings whose right answers are known."""

from collections import Counter

import numpy as np
import pytest
from gensim.models.keyedvectors import KeyedVectors
from scipy.stats import spearmanr
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

from armlm.embeddings.benchmarks import ANALOGY_SET, analogies, gensim_data, read_pairs, similarity
from armlm.embeddings.words import WordSplitter


def splitter() -> WordSplitter:
    tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return WordSplitter(tokenizer.to_str())


def keyed(vectors: dict[str, np.ndarray]) -> KeyedVectors:
    kv = KeyedVectors(vector_size=len(next(iter(vectors.values()))))
    kv.add_vectors(list(vectors), np.array(list(vectors.values()), dtype=np.float32))
    return kv


def test_word_splitting_follows_the_tokenizer_and_refuses_byte_level():
    assert splitter().split("The U.S. band's") == ["the", "u", ".", "s", ".", "band", "'", "s"]
    byte_level = Tokenizer(models.BPE())
    byte_level.pre_tokenizer = pre_tokenizers.ByteLevel()
    with pytest.raises(ValueError, match="kind=wordpiece"):
        WordSplitter(byte_level.to_str())


def test_similarity_is_spearman_over_covered_pairs_with_coverage_and_the_rare_row(tmp_path):
    angles = {"a": 0.0, "b": 0.2, "c": 0.9, "d": 1.4, "e": 3.0}
    kv = keyed({w: np.array([np.cos(t), np.sin(t)]) for w, t in angles.items()})
    pairs = [("A", "B", 9.0), ("a", "c", 5.0), ("a", "d", 3.0), ("a", "e", 1.0), ("a", "zzz", 4.0)]
    counts = Counter({"a": 100, "b": 100, "c": 100, "d": 3, "e": 100})
    result = similarity(kv, pairs, splitter(), counts, rare_below=10)
    assert result["pairs"] == 4 and result["coverage"] == pytest.approx(4 / 5)
    assert result["spearman"] == pytest.approx(1.0)  # cosine falls as the human score falls
    # Rare pairs: (a, d) has a vector for both, (a, zzz) has none (cosine 0, the null-vector policy).
    cos_ad = float(np.cos(1.4))
    assert result["rare_pairs"] == 2 and result["rare_spearman"] is None  # two pairs: too few for a rho
    kv.add_vectors(["f", "g"], np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32))
    more = pairs + [("f", "g", 0.5)]
    counts.update({"f": 1, "g": 1})
    result = similarity(kv, more, splitter(), counts, rare_below=10)
    scored = [(cos_ad, 3.0), (0.0, 4.0), (0.0, 0.5)]
    assert result["rare_spearman"] == pytest.approx(spearmanr(*zip(*scored)).statistic)


def test_similarity_agrees_with_gensims_evaluate_word_pairs():
    rng = np.random.default_rng(0)
    pairs = read_pairs(gensim_data("wordsim353.tsv"))
    words = sorted({w.lower() for a, b, _ in pairs[:120] for w in (a, b)})
    kv = keyed({w: rng.normal(size=8) for w in words})
    ours = similarity(kv, pairs, splitter(), Counter({w: 100 for w in words}), rare_below=1)
    _, gensim_spearman, oov = kv.evaluate_word_pairs(str(gensim_data("wordsim353.tsv")))
    assert ours["spearman"] == pytest.approx(gensim_spearman.statistic, abs=1e-6)
    assert ours["coverage"] == pytest.approx(1 - oov / 100)


def test_analogies_are_right_when_the_offsets_are_planted():
    lines = gensim_data(ANALOGY_SET).read_text().splitlines()
    first_section = []
    for line in lines[1:]:
        if line.startswith(":"):
            break
        first_section.append(line.lower().split())
    capitals = sorted({q[0] for q in first_section} | {q[2] for q in first_section})
    country_of = {q[0]: q[1] for q in first_section} | {q[2]: q[3] for q in first_section}
    rng = np.random.default_rng(0)
    offset = rng.normal(size=64)
    vectors = {}
    for capital in capitals:
        vectors[capital] = rng.normal(size=64)
        vectors[country_of[capital]] = vectors[capital] + offset
    result = analogies(keyed(vectors))
    assert result["sections"]["capital-common-countries"] == 1.0
    assert result["semantic"]["accuracy"] == 1.0 and result["semantic"]["questions"] >= len(first_section)
    # capital-world shares these cities, so it is answered too (and right); no syntactic word is known
    assert result["syntactic"]["questions"] == 0 and result["syntactic"]["accuracy"] is None
    assert 0 < result["overall"]["coverage"] < 0.05
