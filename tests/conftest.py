from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from common.vocabulary import Vocabulary

REPO = Path(__file__).resolve().parents[1]


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist (`pytest -n 2`, the README's command) each worker is one of two processes on two cores:
    one thread each, for torch here and, through the environment, for every process a test starts, so the
    thread pools never oversubscribe the machine."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[name] = "1"
        torch.set_num_threads(1)


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


# A pretraining run of seconds: tiny model, small vocabulary, 8 steps on the embedded corpus (also given to
# `python train.py` on a command line, with data.cache_dir= and hydra.run.dir=)
TINY_OVERRIDES = (
    "model=tiny", "data.block_size=32", "data.batch_size=8", "data.tokenizer.vocab_size=600",
    "trainer.max_steps=8", "trainer.val_check_interval=4", "trainer.limit_val_batches=2",
    "trainer.log_every_n_steps=2", "trainer.enable_progress_bar=false", "max_tokens=null",
    "trainer.precision=32-true",
)


def tiny_config(out: Path, cache: Path, *overrides: str) -> DictConfig:
    """A pretraining config of seconds (TINY_OVERRIDES) writing to `out`."""
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base="1.3"):
        return compose("train", overrides=[*TINY_OVERRIDES, f"data.cache_dir={cache}", f"output_dir={out}",
                                           *overrides])


@pytest.fixture(scope="session")
def tiny_pretrained(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> dict[str, Path]:
    """Run folders of a tiny AR and a tiny MLM pretraining (60 steps each), built once per session. A 4000-token
    vocabulary keeps most words whole, which the fine-tuning tests (NER on first subwords) need."""
    import train

    runs = {}
    for objective in ("ar", "mlm"):
        out = tmp_path_factory.mktemp(f"pretrained-{objective}")
        train.run(tiny_config(out, cache_dir, f"objective={objective}", "trainer.max_steps=60",
                              "trainer.val_check_interval=60", "data.tokenizer.vocab_size=4000"))
        runs[objective] = out
    return runs
