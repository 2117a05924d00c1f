"""Schema versions, and the migrations of checkpoints: users hold checkpoints, so a checkpoint of any version still
loads, brought up to date here, each shim with the date/commit its format changed.

Every JSON artefact armlm writes (summary.json, results.json, diagnostics.json, zeroshot.json, words.json,
stage.json, kept.json) and every checkpoint carries `schema_version`. Run and study artefacts are not migrated as
they are read: readers refuse those older than SCHEMA_VERSION (common.atomic.read_artefact), and
records/rewrite_schema3.py rewrites such a folder once.
"""

from __future__ import annotations

import functools
import re
from importlib.util import find_spec
from typing import Any

from armlm.common.errors import ArmlmError

# 2: 26 November 2026, issue 45 (schema_version written; tasks carry their metrics). 3: 3 December 2026, issue 74
# (run and study artefacts in today's format: records/rewrite_schema3.py)
SCHEMA_VERSION = 3


def schema_version(artefact: dict[str, Any]) -> int:
    """An artefact's version: 1 for those written before versions."""
    return int(artefact.get("schema_version", 1))


def versioned(artefact: dict[str, Any]) -> dict[str, Any]:
    """The artefact with the current `schema_version` first, as writers store it."""
    return {"schema_version": SCHEMA_VERSION, **{k: v for k, v in artefact.items() if k != "schema_version"}}


# Fine-tuning tasks before schema version 2 (26 November 2026, issue 45): TaskInfo in fine-tune checkpoints had no
# `metrics` or `primary_metric`, nor results.json a `primary_metric`; finetune.metrics chose them by task name, and
# analysis.tables.study_tables's plots by its PRIMARY_METRIC table. This is that choice, frozen: the only tasks that existed.
def _metric(factory: str) -> dict[str, str]:
    return {"_target_": f"armlm.finetune.metrics.{factory}"}


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
        raise ArmlmError(f"fine-tuning task {task.get('name')!r} names no metrics or primary metric, and is none of "
                         f"the tasks that existed before they were recorded ({', '.join(HISTORICAL_TASKS)})")
    metrics, primary = HISTORICAL_TASKS[task["name"]]
    return {**task, "metrics": {k: dict(v) for k, v in task.get("metrics", metrics).items()},
            "primary_metric": task.get("primary_metric", primary)}


# --- code references ----------------------------------------------------------------------------------------------
# Before 5 December 2026 (issue 85) armlm's layers were top-level packages, so what a checkpoint or results.json names
# as code ("objectives.mlm.MaskedLM", "finetune.metrics.accuracy") is now armlm.<that>. Only a string whose first two
# parts are an armlm module today is rewritten: "training.log" (a file name) is not code and stays.
BARE_LAYERS = ("common", "models", "objectives", "datamodules", "training", "analysis", "finetune", "embeddings",
               "diagnostics", "generation", "interchange", "sources", "studies", "zeroshot")
# The same day analysis/ was split into tables/, findings/ and reports/: where each module of the flat folder went
# (named without armlm., as references written before name them).
MOVED_MODULES = {
    "analysis.runs": "analysis.tables.runs",
    "analysis.study_runs": "analysis.tables.study_runs",
    "analysis.study_tables": "analysis.tables.study_tables",
    "analysis.diagnostics_tables": "analysis.tables.diagnostics_tables",
    "analysis.curves_reading": "analysis.tables.curves_reading",
    "analysis.verdicts": "analysis.findings.verdicts",
    "analysis.items": "analysis.findings.items",
    "analysis.power": "analysis.findings.power",
    "analysis.quantities": "analysis.findings.quantities",
    "analysis.findings": "analysis.findings.measures",
    "analysis.gate": "analysis.findings.gate",
    "analysis.registrations": "analysis.findings.registrations",
    "analysis.study_plots": "analysis.reports.study_plots",
    "analysis.blimp_report": "analysis.reports.blimp_report",
    "analysis.study_report": "analysis.reports.study_report",
    "analysis.curves_report": "analysis.reports.curves_report",
    "analysis.embeddings_report": "analysis.reports.embeddings_report",
    "analysis.findings_report": "analysis.reports.findings_report",
    "analysis.findings_markdown": "analysis.reports.findings_markdown",
    "analysis.finetune_results": "analysis.reports.finetune_results",
    "analysis.reports": "analysis.reports.registry",
}
BARE_REFERENCE = re.compile(rf"^(?:{'|'.join(BARE_LAYERS)})\.\w+(?:\.\w+)*(?::\w+)?$")


def namespaced(reference: str) -> str:
    """A code reference written before the `armlm` namespace, as it is named now; any other string unchanged."""
    if not BARE_REFERENCE.match(reference):
        return reference
    head = ".".join(reference.partition(":")[0].split(".")[:2])
    if head in MOVED_MODULES:
        return f"armlm.{MOVED_MODULES[head]}{reference[len(head):]}"
    return f"armlm.{reference}" if _armlm_module(head) else reference


@functools.lru_cache(maxsize=None)  # the same few module names recur in every artefact a report reads
def _armlm_module(name: str) -> bool:
    try:
        return find_spec(f"armlm.{name}") is not None
    except ImportError:
        return False


def migrate_code_references(node: Any) -> Any:
    """A checkpoint's or artefact's plain data with every code reference in it namespaced; dict keys, tensors and
    other values as they were (a new container where anything changed)."""
    if isinstance(node, str):
        return namespaced(node)
    if isinstance(node, dict):
        return {key: migrate_code_references(value) for key, value in node.items()}
    if isinstance(node, list | tuple):
        return type(node)(migrate_code_references(value) for value in node)
    return node


# --- checkpoints --------------------------------------------------------------------------------------------------
# Lightning keeps a DataModule's state_dict under the class's qualified name.
PRETRAIN_DATAMODULE_STATE = "PretrainDataModule"


def migrate_pretraining_checkpoint(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """A pretraining checkpoint in the current layout, in place. Before 23 November 2026 (8cae5eb: the resumable
    sampler's position became the DataModule's state) it sat in the module's own `data_position`: hand it over,
    unless the checkpoint has the DataModule's state already. Before 22 November 2026 (e1da6d0) no `skipped_batches` was kept
    (none skipped), and before 23 November 2026 (660408b) no `trained_length` (the block size: None, unknown)."""
    if checkpoint.get("data_position") is not None:
        checkpoint.setdefault(PRETRAIN_DATAMODULE_STATE, dict(checkpoint["data_position"]))
    checkpoint.setdefault("skipped_batches", 0)
    checkpoint.setdefault("trained_length", None)
    return checkpoint


def migrate_token_accounting_state(state: dict[str, Any]) -> dict[str, Any]:
    """TokenAccounting's state in a checkpoint, with None (unknown) for what its writer did not count yet:
    `flops_seen` before the FLOPs budget (23 November 2026, 2050486), `phase_starts` before phased runs recorded
    where each phase began (26 November 2026, e144a75)."""
    return {"flops_seen": None, "phase_starts": None, **state}


# Fine-tuning checkpoints' hyperparameters. Before attention was a value (23 November 2026, 31b95ce) the settings
# and the pretrained checkpoint's summary said `causal: bool`: the group, and its key now. Before `features`
# (25 November 2026, 70720af) feature-based runs concatenated layers.
FINETUNE_ATTENTION_KEYS = {"settings": "attention", "pretrained": "finetune_attention"}
FINETUNE_FEATURES_BEFORE = "concat"
# Before finetune.word_subword (issue 46) every tagger labelled and scored each word at its first subword.
FINETUNE_WORD_SUBWORD_BEFORE = "first"


def migrate_finetune_hparams(saved: dict[str, Any]) -> dict[str, Any]:
    """A fine-tuning checkpoint's hyperparameters (full or static-vectors) under the keys they have now: `causal`
    renamed, `features` given, and the task's metrics named (task_info_defaults). A new dict; groups not changed
    are the saved ones."""
    out = dict(saved)
    for group, key in FINETUNE_ATTENTION_KEYS.items():
        part = dict(saved.get(group) or {})
        if "causal" in part:
            part[key] = "causal" if part.pop("causal") else "bidirectional"
            out[group] = part
    settings = out.get("settings") or {}
    if settings and "features" not in settings:
        settings = out["settings"] = {**settings, "features": FINETUNE_FEATURES_BEFORE}
    if settings and "pooling" in settings and "word_subword" not in settings:  # a checkpoint's, not static vectors'
        out["settings"] = {**settings, "word_subword": FINETUNE_WORD_SUBWORD_BEFORE}
    task = saved.get("task")
    if isinstance(task, dict) and not {"metrics", "primary_metric"} <= task.keys():  # before schema 2
        out["task"] = task_info_defaults(task)
    return out
