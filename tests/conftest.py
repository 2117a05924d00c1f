from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from datamodules.vocabulary import Vocabulary

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """Real corpora from ARMLM_DATA_DIR (default ../shared/data). CI has them, so there a missing folder
    is a failure; elsewhere (a fresh clone) those tests skip."""
    path = Path(os.environ.get("ARMLM_DATA_DIR", REPO.parent / "shared" / "data"))
    if not path.is_dir():
        if os.environ.get("CI"):
            pytest.fail(f"CI must have the shared data folder, but {path} is missing")
        pytest.skip(f"real data folder {path} not found; set ARMLM_DATA_DIR to run this test")
    return path


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache for the session, so tests that share corpus settings tokenize once."""
    return tmp_path_factory.mktemp("armlm-cache")


def make_vocabulary(size: int = 50, seed: int = 0) -> Vocabulary:
    """Special ids 0..5 and a skewed unigram distribution over the ordinary tokens."""
    counts = np.random.default_rng(seed).integers(1, 1000, size=size).astype(np.int64)
    counts[:6] = [0, 3, 100, 100, 0, 50]
    return Vocabulary(size, 0, 1, 2, 3, 4, 5, unigram_counts=counts)


@pytest.fixture
def vocab() -> Vocabulary:
    return make_vocabulary()
