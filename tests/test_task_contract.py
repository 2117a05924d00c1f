"""The task contract, checked for every config in configs/task/ (discovered, never listed): adding a fine-tuning task
is one YAML, and this test covers it with no edit.

Per task: the config composes, declares a kind and metrics whose factories build for its labels and compute finite
values on a batch of its kind, names a primary metric among the values they compute, and its data `_target_` is a
fine-tuning datamodule (GLUE-style ones with a reader specification that builds a GlueTask). A throwaway GLUE-style
task, written to a temporary config folder, is read, encoded, fed to a fine-tuning module and scored."""

from __future__ import annotations

import math

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
from tests.helpers.configs import CONFIGS, task_config
from tests.helpers.tasks import task_info

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
