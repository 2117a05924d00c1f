"""The task contract, checked for every config in configs/task/ (discovered, never listed): adding a fine-tuning task
is one YAML, and this test covers it with no edit.

Per task: the config composes, declares a kind and metrics whose factories build for its labels and compute finite
values on a batch of its kind, names a primary metric among the values they compute, and its data `_target_` is a
fine-tuning datamodule (GLUE-style ones with a reader specification that builds a GlueTask). A throwaway GLUE-style
task, written to a temporary config folder, is read, encoded, fed to a fine-tuning module and scored."""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path

import pytest
import torch
from hydra.utils import get_class
from omegaconf import OmegaConf
from torch import Tensor

from armlm.common.migrations import HISTORICAL_TASKS, task_info_defaults
from armlm.common.vocabulary import IGNORE_INDEX
from armlm.datamodules.finetune import TASK_KINDS, FinetuneDataModule, GlueDataModule, TaskInfo
from armlm.datamodules.glue import GlueTask
from armlm.finetune.metrics import build_metric, task_metrics
from armlm.finetune.module import FinetuneModule
from armlm.finetune.run import majority_baseline
from armlm.training.setup import build
from tests.helpers.configs import CONFIGS, task_config
from tests.helpers.tasks import task_info
from tests.helpers.vocabularies import word_tokenizer_json

TASKS = sorted(path.stem for path in (CONFIGS / "task").glob("*.yaml") if not path.stem.startswith("_"))


def fake_batch(info: TaskInfo, n: int = 24) -> tuple[Tensor, Tensor]:
    """(predicted, gold) as FinetuneModule.predictions gives them for the task's kind, mostly right."""
    if info.kind == "regression":
        gold = torch.linspace(0, 5, n)
        return gold + torch.sin(torch.arange(n) * 1.7), gold
    if info.kind == "classification":
        gold = torch.arange(n) % len(info.labels)
        return torch.where(torch.arange(n) % 5 == 0, (gold + 1) % len(info.labels), gold), gold
    tag = info.labels.index
    kinds = [label[2:] for label in info.labels if label.startswith("B-") and f"I-{label[2:]}" in info.labels]
    entity = [tag(f"B-{kinds[0]}"), tag(f"I-{kinds[0]}")] if kinds else [tag("O")] * 2
    gold = torch.tensor([[*entity, tag("O"), *entity, tag("O")], [tag("O"), *entity, tag("O"), IGNORE_INDEX,
                                                                  IGNORE_INDEX]])
    predicted = gold.clone()
    predicted[1, 2] = tag("O")  # one entity cut short: a miss
    return predicted.clamp(min=0), gold


def values(computed: Tensor | dict[str, Tensor]) -> dict[str, float]:
    return {k: float(v) for k, v in computed.items()} if isinstance(computed, dict) else {"": float(computed)}


def test_every_task_config_is_discovered():
    assert {"cola", "stsb", "mnli", "conll2003"} <= set(TASKS)


@pytest.mark.parametrize("name", TASKS)
def test_task_declares_what_it_is(name):
    cfg = task_config(name)
    assert cfg.task.name == name  # results folders, TensorBoard tags and the hub's config name use it
    assert cfg.task.kind in TASK_KINDS
    data_class = get_class(cfg.task.data._target_)
    assert issubclass(data_class, FinetuneDataModule)
    info = task_info(cfg)
    assert (info.name, info.kind, info.primary_metric) == (name, cfg.task.kind, cfg.task.primary_metric)
    assert info.metrics == OmegaConf.to_container(cfg.task.metrics) and list(info.metrics)  # plain, ordered
    assert (info.kind == "regression") == (not info.labels) and info.eval_splits
    if issubclass(data_class, GlueDataModule):
        spec = GlueTask.from_config(name, cfg.task.data)
        assert (spec.labels, spec.dev_splits) == (info.labels, info.eval_splits)


@pytest.mark.parametrize("name", TASKS)
def test_metrics_compute_finite_values_and_include_the_primary_metric(name):
    info = task_info(task_config(name))
    predicted, gold = fake_batch(info)
    logged = {}
    for metric_name, spec in info.metrics.items():
        metric = build_metric(spec, info.labels)
        metric.update(predicted, gold)
        scores = values(metric.compute())
        assert all(math.isfinite(v) for v in scores.values()), (metric_name, scores)
        logged |= {metric_name: scores[""]} if "" in scores else scores  # a dict logs under its own keys
    collection = task_metrics(info)
    collection.update(predicted, gold)
    assert {k: float(v) for k, v in collection.compute().items()} == pytest.approx(logged)
    assert info.primary_metric in logged, f"task.primary_metric={info.primary_metric} is none of {sorted(logged)}"


@pytest.mark.parametrize("name", sorted(HISTORICAL_TASKS))
def test_configs_of_the_first_tasks_match_what_older_artefacts_are_read_with(name):
    """Checkpoints and results.json from before tasks named their metrics read them from common.migrations: a
    resumed run, and a report over kept records, must see what the config says."""
    cfg = task_config(name)
    old = task_info_defaults({"name": name})
    assert (old["metrics"], old["primary_metric"]) == (OmegaConf.to_container(cfg.task.metrics),
                                                       cfg.task.primary_metric)


THROWAWAY = """# A GLUE-style task no Python knows: one YAML.
defaults:
  - _glue
  - _self_
name: toy_polarity
kind: classification
metrics:
  mcc: {_target_: armlm.finetune.metrics.matthews}
  accuracy: {_target_: armlm.finetune.metrics.accuracy}
primary_metric: accuracy
data:
  folder: Polarity
  text_columns: [text]
  label_column: polarity
  labels: [neg, pos]
  dev_splits: [dev]
  has_header: true
  hub_text_columns: [text]
  max_length: 16
epochs: 1
"""
ROWS = {"train": [("the call was rejected", "neg"), ("a good call", "pos"), ("it is bad", "neg"),
                  ("that said , it was good", "pos"), ("the eu rejects it", "neg")],
        "dev": [("a good one", "pos"), ("it was bad", "neg"), ("good", "pos")]}


@pytest.fixture
def throwaway(tmp_path: Path) -> tuple[Path, Path]:
    """A config folder holding task/toy_polarity.yaml, and its data in the GLUE release layout."""
    (tmp_path / "configs" / "task").mkdir(parents=True)
    (tmp_path / "configs" / "task" / "toy_polarity.yaml").write_text(THROWAWAY)
    (tmp_path / "data" / "Polarity").mkdir(parents=True)
    for split, rows in ROWS.items():
        lines = ["id\ttext\tpolarity", *(f"{i}\t{text}\t{label}" for i, (text, label) in enumerate(rows))]
        (tmp_path / "data" / "Polarity" / f"{split}.tsv").write_text("\n".join(lines) + "\n")
    return tmp_path / "configs", tmp_path / "data"


def test_a_new_glue_style_task_is_one_yaml(throwaway):
    """docs/extending.md's recipe: a task YAML in a folder of one's own (hydra.searchpath) is read, encoded, given
    its majority baseline, fed to a fine-tuning module and scored, with no Python."""
    configs, data = throwaway
    words = sorted({w for rows in ROWS.values() for text, _ in rows for w in text.split()})
    cfg = task_config("toy_polarity", f"hydra.searchpath=[file://{configs}]")
    dm = build(cfg.task.data, tokenizer_json=word_tokenizer_json(words), adjusted={"source": str(data)})
    dm.setup("fit")
    assert dm.info.name == "toy_polarity" and dm.info.labels == ("neg", "pos")
    assert [e.labels for e in dm.encoded["train"]] == [0, 1, 0, 1, 0] and len(dm.encoded["dev"]) == 3
    first = dm.tokenizer.decode(dm.encoded["train"][0].input_ids)
    assert first == "[CLS] the call was rejected [SEP]"  # encoded with the given tokenizer, no [UNK]
    # The majority baseline (neg) on dev: one of three right, its Matthews correlation 0 (constant predictions).
    assert majority_baseline(dm, dm.info) == {"dev": {"mcc": 0.0, "accuracy": pytest.approx(1 / 3, abs=1e-6)}}
    # A fine-tuning module builds its head and metrics from what the datamodule says, and scores a dev batch.
    model = {"vocab_size": dm.tokenizer.get_vocab_size(), "max_len": 16, "d_model": 16, "n_layers": 1,
             "n_heads": 2, "d_ff": 32, "dropout": 0.0}
    settings = {"mode": "full", "attention": "bidirectional", "pooling": "first", "head_dropout": 0.0,
                "feature_layers": 1}
    optim = {"lr": 1e-3, "weight_decay": 0.0, "warmup_ratio": 0.0, "betas": [0.9, 0.999], "eps": 1e-8}
    module = FinetuneModule(model, asdict(dm.info), settings, optim).eval()
    batch = next(iter(dm.val_dataloader()[0]))
    with torch.no_grad():
        predicted, gold = module.predictions(module(batch), batch)
    assert sorted(gold.tolist()) == [0, 1, 1]  # the dev labels (the loader may order them by length)
    module.val_metrics[0].update(predicted, gold)
    scores = {k: float(v) for k, v in module.val_metrics[0].compute().items()}
    assert set(scores) == {"mcc", "accuracy"} and all(math.isfinite(v) for v in scores.values())
    assert scores["accuracy"] == pytest.approx(float((predicted == gold).float().mean()))
