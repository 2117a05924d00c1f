from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import pytest
import torch

from armlm.common.vocabulary import Vocabulary
from tests.helpers.configs import REPO
from tests.helpers.runs import PretrainedRuns, shared_across_workers
from tests.helpers.vocabularies import make_vocabulary


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--regold", action="store_true",
                     help="rewrite the golden tables (tests/golden/<kind>/) from the reports of the selected "
                          "synthetic studies instead of comparing them (after a change to the report code or to "
                          "tests/helpers/synthetic_studies.py: pytest tests/test_records_reports.py --regold, then "
                          "review the diff)")


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist (`pytest -n 2`, the README's command) each worker is one of two processes on two cores:
    one thread each, for torch here and, through the environment, for every process a test starts, so the
    thread pools never oversubscribe the machine."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[name] = "1"
        torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def matmul_precision_as_found():
    """torch's fp32 matmul precision is the process's, and a run sets its trainer's (trainer=gpu: high): set back
    after each test, so no later test in the worker runs at another's."""
    precision = torch.get_float32_matmul_precision()
    yield
    torch.set_float32_matmul_precision(precision)


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
def hf_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A folder per model family the installed transformers has (tests.helpers.hf_models): a tiny random model and a
    tokenizer trained here, saved once per test run and read back by path."""
    from tests.helpers.hf_models import FAMILIES
    return {name: shared_across_workers(tmp_path_factory, f"hf-{name}", build) for name, build in FAMILIES.items()}


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One token cache for the whole run, shared by the workers (a cache folder has its own writer lock,
    datamodules.shards), so tests that share corpus settings tokenize once."""
    return shared_across_workers(tmp_path_factory, "armlm-cache", lambda folder: None)


@pytest.fixture
def vocab() -> Vocabulary:
    return make_vocabulary()


@pytest.fixture
def study(tmp_path: Path) -> Path:
    """A study folder of three seeds' fine-tuning scores and diagnostics (tests.helpers.findings.write_study),
    which the findings, gate and report tests read (a module may override it with a study of its own)."""
    # Imported here, not at the top: pandas and the report's scipy would load in every process that reads this
    # conftest, xdist's controller included, which runs no test (about 2 s of imports before the workers start).
    from tests.helpers.findings import write_study

    return write_study(tmp_path)


@pytest.fixture(scope="session")
def tiny_pretrained(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> Mapping[str, Path]:
    """Run folders of a tiny AR and a tiny MLM pretraining (60 steps each), built once per test run. A 4000-token
    vocabulary keeps most words whole, which the fine-tuning tests (NER on first subwords) need."""
    return PretrainedRuns(tmp_path_factory, cache_dir, "tiny-pretrained", {
        objective: (f"objective={objective}", "trainer.max_steps=60", "trainer.val_check_interval=60",
                    "data.tokenizer.vocab_size=4000") for objective in ("ar", "mlm")})


@pytest.fixture(scope="session")
def tokenizer_json() -> str:
    """A 700-token WordPiece of 300 documents of the embedded corpus (seconds, no pretraining)."""
    from armlm.datamodules.corpora import EmbeddedWikipedia
    from armlm.datamodules.tokenizer import TokenizerSettings, train_tokenizer

    documents = [text for _, text in EmbeddedWikipedia().read_documents()[:300]]
    return train_tokenizer(documents, TokenizerSettings(vocab_size=700)).to_str()


@pytest.fixture(scope="session")
def untrained(tmp_path_factory: pytest.TempPathFactory, tokenizer_json: str) -> Mapping[str, Path]:
    """A run folder per objective holding an untrained checkpoint (tests.helpers.checkpoints.UntrainedRuns, each
    written on first use): the fast lane's checkpoints, for tests of what reads one rather than of what training
    made of it."""
    from tests.helpers.checkpoints import UntrainedRuns

    names = sorted(path.stem for path in (REPO / "configs" / "objective").glob("*.yaml"))
    return UntrainedRuns(tmp_path_factory.mktemp("untrained"), tokenizer_json, names)


@pytest.fixture
def blimp_dir(tmp_path: Path) -> Path:
    """A BLiMP folder of two paradigms, three pairs (tests.helpers.blimp.write_two_paradigms), for the zero-shot and
    study runs on a model folder."""
    from tests.helpers.blimp import write_two_paradigms

    return write_two_paradigms(tmp_path / "blimp")


@pytest.fixture(scope="session")
def sentences(data_dir: Path) -> list[str]:
    """Real sentences of different lengths (a batch of them pads): SST-2's dev split, cut to the words that fit the
    32 positions the test checkpoints were trained on (an export holds only those)."""
    lines = (data_dir / "glue" / "SST-2" / "dev.tsv").read_text().splitlines()[1:]
    return [" ".join(line.split("\t")[0].split()[:3 + k]) for k, line in enumerate(lines[:6])]


@pytest.fixture
def without_wandb_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No W&B key where W&B looks without asking (the environment, an identity token, netrc): a HOME of the test's
    own, returned, where a test may write a ~/.netrc."""
    for name in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_IDENTITY_TOKEN_FILE", "WANDB_BASE_URL", "NETRC"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path
