"""Tokenizer training gives the same ids in every process, and the canonical numbering changes no tokenization."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tokenizers import Tokenizer

import armlm.datamodules.tokenizer as tokenizer_module
from armlm.common.vocabulary import SPECIAL_TOKENS
from armlm.datamodules.corpora import EmbeddedWikipedia
from armlm.datamodules.tokenizer import TokenizerSettings, canonical_ids, train_tokenizer

REPO = Path(__file__).resolve().parents[1]
KINDS = ("wordpiece", "byte_bpe")
TRAIN_IN_A_FRESH_PROCESS = """
import json, sys
from armlm.datamodules.corpora import EmbeddedWikipedia
from armlm.datamodules.tokenizer import TokenizerSettings, train_tokenizer
documents = EmbeddedWikipedia().load()["train"][:40]
print(json.dumps({kind: json.loads(train_tokenizer(documents, TokenizerSettings(vocab_size=3000, kind=kind)).to_str())
                  for kind in sys.argv[1:]}))
"""


@pytest.mark.slow
def test_two_processes_train_the_same_tokenizer():
    """Hash-map order differs per process (Python and Rust seed their hashes afresh), so this needs two; each trains
    every kind (a process start costs more than a training)."""
    first, second = (
        json.loads(subprocess.run([sys.executable, "-c", TRAIN_IN_A_FRESH_PROCESS, *KINDS], cwd=REPO, check=True,
                                  capture_output=True, text=True).stdout)
        for _ in range(2)
    )
    assert list(first) == list(KINDS)
    for kind in KINDS:
        assert first[kind]["model"]["vocab"] == second[kind]["model"]["vocab"], kind
        assert first[kind] == second[kind], kind
        vocab = first[kind]["model"]["vocab"]
        assert [vocab[token] for token in SPECIAL_TOKENS] == list(range(len(SPECIAL_TOKENS))), kind
        assert sorted(vocab.values()) == list(range(len(vocab))), kind


@pytest.fixture(scope="module")
def documents() -> list[str]:
    return EmbeddedWikipedia().load()["train"][:12]


@pytest.mark.parametrize("kind", KINDS)
def test_canonical_ids_change_no_tokenization(kind, documents, monkeypatch):
    monkeypatch.setattr(tokenizer_module, "canonical_ids", lambda tokenizer: tokenizer)
    trained: Tokenizer = train_tokenizer(documents, TokenizerSettings(vocab_size=2000, kind=kind))
    canonical = canonical_ids(trained)
    assert canonical.get_vocab_size() == trained.get_vocab_size()
    text = " ".join(documents[-1].split()[:300]) + " Unseenwordzzq 1234 naïve"
    assert canonical.encode(text).tokens == trained.encode(text).tokens
    assert canonical.decode(canonical.encode(text).ids) == trained.decode(trained.encode(text).ids)
    assert [canonical.token_to_id(t) for t in SPECIAL_TOKENS] == list(range(len(SPECIAL_TOKENS)))
