from __future__ import annotations

import copy
import functools
import os
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np
import pytest
import torch
from filelock import FileLock
from omegaconf import DictConfig, OmegaConf

from common.config import compose_config
from common.vocabulary import Vocabulary

REPO = Path(__file__).resolve().parents[1]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--regold", action="store_true",
                     help="rewrite the golden tables of the selected report fixtures from report=only instead of "
                          "comparing (after a change to the report code: pytest tests/test_records_reports.py "
                          "--regold -m 'slow or not slow', then review the diff)")


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


def shared_across_workers(tmp_path_factory: pytest.TempPathFactory, name: str,
                          build: Callable[[Path], object]) -> Path:
    """A folder built once per test run, by whichever xdist worker asks first: the others wait on its lock, then
    read it. It counts as built only once `build` returned (a marker file), so a failed build is redone by the
    next test that asks, not taken for finished."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # shared by the workers of this run (pytest-of-<user>/pytest-<n>/)
    folder = base / "shared" / name
    folder.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder) + ".lock"):
        if not (folder / ".built").exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            build(folder)
            (folder / ".built").touch()
    return folder


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


def make_vocabulary(size: int = 50, seed: int = 0) -> Vocabulary:
    """Special ids 0..5 and a skewed unigram distribution over the ordinary tokens."""
    counts = np.random.default_rng(seed).integers(1, 1000, size=size).astype(np.int64)
    counts[:6] = [0, 3, 100, 100, 0, 50]
    return Vocabulary(size, 0, 1, 2, 3, 4, 5, unigram_counts=counts)


@pytest.fixture
def vocab() -> Vocabulary:
    return make_vocabulary()


@pytest.fixture
def study(tmp_path: Path) -> Path:
    """A study folder of three seeds' fine-tuning scores and diagnostics (tests/findings_helpers.write_study),
    which the findings, gate and report tests read (a module may override it with a study of its own)."""
    # Imported here, not at the top: pandas and the report's scipy would load in every process that reads this
    # conftest, xdist's controller included, which runs no test (about 2 s of imports before the workers start).
    from tests.findings_helpers import write_study

    return write_study(tmp_path)


# A pretraining run of seconds: tiny model, small vocabulary, 8 steps on the embedded corpus (also given to
# `python train.py` on a command line, with data.cache_dir= and hydra.run.dir=)
TINY_OVERRIDES = (
    "model=tiny", "data.block_size=32", "data.batch_size=8", "data.tokenizer.vocab_size=600",
    "trainer.max_steps=8", "trainer.val_check_interval=4", "trainer.limit_val_batches=2",
    "trainer.log_every_n_steps=2", "trainer.enable_progress_bar=false", "max_tokens=null",
    "trainer.precision=32-true",
)


@functools.lru_cache(maxsize=None)
def _composed(name: str, overrides: tuple[str, ...]) -> DictConfig:
    return compose_config(name, list(overrides))


def composed_config(name: str, overrides: Sequence[str], **settings: object) -> DictConfig:
    """configs/<name>.yaml with the overrides, composed once per worker for each distinct list (a composition costs
    about a tenth of a second, and the suite composes the same lists hundreds of times), as a fresh copy; then the
    plain settings (dotted keys, here the run's paths, which differ from test to test) set on it."""
    cfg = copy.deepcopy(_composed(name, tuple(overrides)))
    for key, value in settings.items():
        OmegaConf.update(cfg, key, value)
    return cfg


def study_config(*overrides: str) -> DictConfig:
    """configs/study.yaml with the overrides (composed_config), as study.py would compose them."""
    return composed_config("study", overrides)


def tiny_config(out: Path, cache: Path, *overrides: str) -> DictConfig:
    """A pretraining config of seconds (TINY_OVERRIDES) writing to `out`."""
    return composed_config("train", [*TINY_OVERRIDES, *overrides], **{"data.cache_dir": str(cache),
                                                                       "output_dir": str(out)})


class PretrainedRuns(Mapping[str, Path]):
    """Run folders of tiny pretraining runs (label -> overrides of tiny_config), each built on first use, once per
    test run across the workers: two workers that need different runs build them side by side."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory, cache_dir: Path, name: str,
                 runs: dict[str, tuple[str, ...]]) -> None:
        self.tmp_path_factory, self.cache_dir, self.name, self.runs = tmp_path_factory, cache_dir, name, runs

    def __getitem__(self, label: str) -> Path:
        from training.run import run_pretraining

        build = lambda folder: run_pretraining(tiny_config(folder, self.cache_dir, *self.runs[label]))  # noqa: E731
        return shared_across_workers(self.tmp_path_factory, f"{self.name}-{label}", build)

    def __iter__(self) -> Iterator[str]:
        return iter(self.runs)

    def __len__(self) -> int:
        return len(self.runs)


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
    from datamodules.corpora import EmbeddedWikipedia
    from datamodules.tokenizer import TokenizerSettings, train_tokenizer

    documents = [text for _, text in EmbeddedWikipedia().read_documents()[:300]]
    return train_tokenizer(documents, TokenizerSettings(vocab_size=700)).to_str()


def perturbed(model: torch.nn.Module, seed: int) -> None:
    """Give the norms and the LM-head bias values training would, so nothing is exported by luck of an init."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and name.endswith("weight"):
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=g))
            elif "norm" in name or name == "lm_bias" or name.startswith("type_embedding"):
                p.copy_(0.3 * torch.randn(p.shape, generator=g) + 0.05)


def pretraining_checkpoint(folder: Path, tokenizer_json: str, objective: str, *overrides: str) -> Path:
    """A checkpoint as `armlm train` writes it (hyperparameters, the module's state dict, the tokenizer), random
    weights, in milliseconds: what reads a checkpoint (export, scoring) does not care whether it was trained."""
    from omegaconf import OmegaConf
    from tokenizers import Tokenizer

    from models.backbone import ModelConfig
    from training.lit_module import PretrainModule

    cfg = tiny_config(folder, folder, f"objective={objective}", *overrides)
    vocab_size = Tokenizer.from_str(tokenizer_json).get_vocab_size()
    model = {**OmegaConf.to_container(cfg.model, resolve=True), "vocab_size": vocab_size}
    model = {k: v for k, v in model.items() if k in ModelConfig.__dataclass_fields__}
    module = PretrainModule(model=model, objective=OmegaConf.to_container(cfg.objective, resolve=True),
                            optim=OmegaConf.to_container(cfg.optim, resolve=True), seed=0)
    perturbed(module.model, seed=len(objective))
    path = folder / "checkpoints" / "last.ckpt"
    path.parent.mkdir(parents=True)
    torch.save({"hyper_parameters": dict(module.hparams), "state_dict": module.state_dict(),
                "tokenizer_json": tokenizer_json, "trained_length": 32, "armlm_commit": "abc123"}, path)
    return path


@pytest.fixture(scope="session")
def untrained(tmp_path_factory: pytest.TempPathFactory, tokenizer_json: str) -> dict[str, Path]:
    """A run folder per objective holding an untrained checkpoint (pretraining_checkpoint): the fast lane's
    checkpoints, for tests of what reads one rather than of what training made of it."""
    root = tmp_path_factory.mktemp("untrained")
    names = sorted(path.stem for path in (REPO / "configs" / "objective").glob("*.yaml"))
    for name in names:
        pretraining_checkpoint(root / name, tokenizer_json, name)
    return {name: root / name for name in names}


@pytest.fixture(scope="session")
def sentences(data_dir: Path) -> list[str]:
    """Real sentences of different lengths (a batch of them pads): SST-2's dev split, cut to the words that fit the
    32 positions the test checkpoints were trained on (an export holds only those)."""
    lines = (data_dir / "glue" / "SST-2" / "dev.tsv").read_text().splitlines()[1:]
    return [" ".join(line.split("\t")[0].split()[:3 + k]) for k, line in enumerate(lines[:6])]
