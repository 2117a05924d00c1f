"""Word-level benchmarks shipped inside gensim's wheel: SimLex-999 and WordSim-353 (Spearman rho between cosine
similarity and the human scores) and the Google analogy set (3CosAdd accuracy by section, gensim's own scorer).

Coverage policy. The headline figures read only words that have their own trained vector (seen `min_count`
times in the training split), so every method trained with the same `min_count` on the same corpus is scored on
the same pairs and questions. The rare-word row (`rare_spearman`) instead reads every pair with a word seen
fewer than `rare_below` times and gives each method's vector for an unseen word: fastText builds one from its
n-grams, the others have none and score the pair 0 (Bojanowski et al. 2017's "null vectors" for skip-gram)."""

from __future__ import annotations

import math
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import gensim
import numpy as np
from gensim.models.keyedvectors import KeyedVectors
from scipy.stats import spearmanr

from armlm.common.errors import ArmlmError, ArmlmFileError
from armlm.embeddings.words import WordSplitter

SIMILARITY_SETS = {"simlex999": "simlex999.txt", "wordsim353": "wordsim353.tsv"}
ANALOGY_SET = "questions-words.txt"
SEMANTIC_SECTIONS = 5  # the Google set's first five sections (capitals, currency, city-in-state, family)


def gensim_data(name: str) -> Path:
    # gensim.test.utils.datapath would also build gensim's test fixtures; the files sit beside it.
    path = Path(gensim.__file__).parent / "test" / "test_data" / name
    if not path.is_file():
        raise ArmlmFileError(f"{path} is missing: this gensim wheel does not ship {name}; reinstall gensim")
    return path


def read_pairs(path: Path) -> list[tuple[str, str, float]]:
    pairs = []
    for line_no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) != 3:
            raise ArmlmError(f"{path}:{line_no}: expected 'word<TAB>word<TAB>score', got {line!r}")
        pairs.append((fields[0], fields[1], float(fields[2])))
    return pairs


def cosine(u: np.ndarray, v: np.ndarray) -> float:
    norm = float(np.linalg.norm(u) * np.linalg.norm(v))
    return float(u @ v) / norm if norm > 0 else 0.0


def trained_vector(keyed: KeyedVectors, word: str) -> np.ndarray | None:
    return keyed[word] if word in keyed.key_to_index else None


def any_vector(keyed: KeyedVectors, word: str) -> np.ndarray | None:
    """The trained vector, else whatever the method builds for an unseen word (fastText's n-grams), else None."""
    try:
        return keyed[word]
    except KeyError:
        return None


def similarity(keyed: KeyedVectors, pairs: list[tuple[str, str, float]], normalize: WordSplitter,
               counts: Counter[str], rare_below: int) -> dict[str, Any]:
    """Spearman rho over the pairs whose words both have trained vectors, with its coverage; and over every pair
    holding a rare word, unseen words taking the method's own vector or none (cosine 0)."""
    def key(word: str) -> str:
        return " ".join(normalize.split(word))  # a word the tokenizer splits in two has no vector of its own

    covered, rare = [], []
    for first, second, human in pairs:
        a, b = key(first), key(second)
        va, vb = trained_vector(keyed, a), trained_vector(keyed, b)
        if va is not None and vb is not None:
            covered.append((cosine(va, vb), human))
        if min(counts[a], counts[b]) < rare_below:
            wa, wb = any_vector(keyed, a), any_vector(keyed, b)
            rare.append((cosine(wa, wb) if wa is not None and wb is not None else 0.0, human))
    return {"spearman": rho(covered), "pairs": len(covered), "coverage": len(covered) / len(pairs),
            "rare_spearman": rho(rare), "rare_pairs": len(rare)}


def rho(scored: list[tuple[float, float]]) -> float | None:
    if len(scored) < 3:
        return None
    model, human = zip(*scored)
    with warnings.catch_warnings():  # constant scores (every pair null): no rho, said by None below
        warnings.simplefilter("ignore")
        value = spearmanr(model, human).statistic
    return None if math.isnan(value) else float(value)  # NaN: constant scores


def analogies(keyed: KeyedVectors) -> dict[str, Any]:
    """gensim's 3CosAdd scorer (questions with an unknown word are skipped, as in Mikolov et al.), with accuracy
    and coverage over the semantic and the syntactic sections and overall."""
    path = gensim_data(ANALOGY_SET)
    asked = Counter()
    section = None
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith(":"):
            section = line[1:].strip()
        elif line.strip():
            asked[section] += 1
    _, sections = keyed.evaluate_word_analogies(str(path), restrict_vocab=len(keyed.key_to_index))
    by_name = {s["section"]: s for s in sections}
    names = list(asked)
    groups = {"semantic": names[:SEMANTIC_SECTIONS], "syntactic": names[SEMANTIC_SECTIONS:], "overall": names}
    result = {}
    for group, members in groups.items():
        correct = sum(len(by_name[m]["correct"]) for m in members if m in by_name)
        answered = correct + sum(len(by_name[m]["incorrect"]) for m in members if m in by_name)
        result[group] = {"accuracy": correct / answered if answered else None, "questions": answered,
                         "coverage": answered / sum(asked[m] for m in members)}
    result["sections"] = {m: section_accuracy(by_name.get(m)) for m in names}
    return result


def section_accuracy(section: dict[str, Any] | None) -> float | None:
    answered = len(section["correct"]) + len(section["incorrect"]) if section else 0
    return len(section["correct"]) / answered if answered else None


def score(keyed: KeyedVectors, normalize: WordSplitter, counts: Counter[str], rare_below: int) -> dict[str, Any]:
    """Every benchmark for one set of vectors."""
    scores: dict[str, Any] = {name: similarity(keyed, read_pairs(gensim_data(file)), normalize, counts, rare_below)
                              for name, file in SIMILARITY_SETS.items()}
    scores["analogies"] = analogies(keyed)
    return scores
