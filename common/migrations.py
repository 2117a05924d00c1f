"""Compatibility for artefacts written before schema versions: every shim that reads an older record, checkpoint or
summary lives here, each with the date/commit its format changed.

Every JSON artefact armlm writes (summary.json, results.json, diagnostics.json, zeroshot.json, words.json,
stage.json, kept.json) and every checkpoint's hyperparameters carry `schema_version`. Those written before it
existed read as version 1; `migrate_*` brings an artefact of any version to the current one, so readers elsewhere
see one format.
"""

from __future__ import annotations

from typing import Any

SCHEMA_VERSION = 2  # 2: 26 November 2026, issue 45 (schema_version written; tasks carry their metrics)


def schema_version(artefact: dict[str, Any]) -> int:
    """An artefact's version: 1 for those written before versions."""
    return int(artefact.get("schema_version", 1))


def versioned(artefact: dict[str, Any]) -> dict[str, Any]:
    """The artefact with the current `schema_version` first, as writers store it."""
    return {"schema_version": SCHEMA_VERSION, **{k: v for k, v in artefact.items() if k != "schema_version"}}


# Fine-tuning tasks before schema version 2 (26 November 2026, issue 45): TaskInfo in fine-tune checkpoints had no
# `metrics` or `primary_metric`, nor results.json a `primary_metric`; finetune.metrics chose them by task name, and
# analysis.study's plots by its PRIMARY_METRIC table. This is that choice, frozen: the only tasks that existed.
def _metric(factory: str) -> dict[str, str]:
    return {"_target_": f"finetune.metrics.{factory}"}


_ACCURACY = {"accuracy": _metric("accuracy")}
_F1_ACCURACY = {"f1": _metric("binary_f1"), "accuracy": _metric("accuracy")}
HISTORICAL_TASKS: dict[str, tuple[dict[str, dict[str, str]], str]] = {  # name: (metrics, primary metric)
    "cola": ({"mcc": _metric("matthews")}, "mcc"),
    "sst2": (_ACCURACY, "accuracy"),
    "mrpc": (_F1_ACCURACY, "f1"),
    "qqp": (_F1_ACCURACY, "f1"),
    "stsb": ({"pearson": _metric("pearson"), "spearman": _metric("spearman")}, "pearson"),
    "mnli": (_ACCURACY, "accuracy"),
    "qnli": (_ACCURACY, "accuracy"),
    "rte": (_ACCURACY, "accuracy"),
    "wnli": (_ACCURACY, "accuracy"),
    "conll2003": ({"entities": _metric("entity_f1")}, "f1"),  # EntityF1 reports f1, precision, recall, f1_<TYPE>
}


def task_info_defaults(task: dict[str, Any]) -> dict[str, Any]:
    """A fine-tuning task's description (a checkpoint's TaskInfo dict, or just {"name": ...} from an old
    results.json) with the `metrics` and `primary_metric` its version-1 writer used, where it lacks them."""
    if "metrics" in task and "primary_metric" in task:
        return dict(task)
    if task.get("name") not in HISTORICAL_TASKS:
        raise ValueError(f"fine-tuning task {task.get('name')!r} names no metrics or primary metric, and is none of "
                         f"the tasks that existed before they were recorded ({', '.join(HISTORICAL_TASKS)})")
    metrics, primary = HISTORICAL_TASKS[task["name"]]
    return {**task, "metrics": {k: dict(v) for k, v in task.get("metrics", metrics).items()},
            "primary_metric": task.get("primary_metric", primary)}


# --- checkpoints --------------------------------------------------------------------------------------------------
# Lightning keeps a DataModule's state_dict under the class's qualified name.
PRETRAIN_DATAMODULE_STATE = "PretrainDataModule"


def migrate_pretraining_checkpoint(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """A pretraining checkpoint in the current layout, in place. Before 21 November 2026 (the resumable sampler
    moved into the DataModule) the data position sat in the module's own `data_position`: hand it over, unless the
    checkpoint has the DataModule's state already."""
    if checkpoint.get("data_position") is not None:
        checkpoint.setdefault(PRETRAIN_DATAMODULE_STATE, dict(checkpoint["data_position"]))
    return checkpoint


# --- study records -----------------------------------------------------------------------------------------------
# Budgets of train.yaml that default to null. Stage records written between the FLOPs budget's arrival
# (24 November 2026) and the rule that plans name only what differs from train.yaml spell them out as "<key>=null":
# the same run.
NULL_DEFAULT_BUDGETS = ("max_flops", "data_epochs")


def stage_overrides(overrides: list[str]) -> list[str]:
    """A stage record's overrides as plans write them now (restated null budgets dropped)."""
    restated = {f"{key}=null" for key in NULL_DEFAULT_BUDGETS}
    return [o for o in overrides if o not in restated]

