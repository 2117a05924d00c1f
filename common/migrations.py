"""Compatibility for artefacts written before schema versions: every shim that reads an older record, checkpoint or
summary lives here, each with the date/commit its format changed.

Every JSON artefact armlm writes (summary.json, results.json, diagnostics.json, zeroshot.json, words.json,
stage.json, kept.json) and every checkpoint's hyperparameters carry `schema_version`. Those written before it
existed read as version 1; `migrate_*` brings an artefact of any version to the current one, so readers elsewhere
see one format.
"""

from __future__ import annotations

import math
from typing import Any

from common.errors import ArmlmError

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
        raise ArmlmError(f"fine-tuning task {task.get('name')!r} names no metrics or primary metric, and is none of "
                         f"the tasks that existed before they were recorded ({', '.join(HISTORICAL_TASKS)})")
    metrics, primary = HISTORICAL_TASKS[task["name"]]
    return {**task, "metrics": {k: dict(v) for k, v in task.get("metrics", metrics).items()},
            "primary_metric": task.get("primary_metric", primary)}


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


# --- study records -----------------------------------------------------------------------------------------------
# Budgets of train.yaml that default to null. Stage records written between the FLOPs budget's arrival in studies
# and the rule that plans name only what differs from train.yaml (both 23 November 2026, 1fafc9d to 0d6bf9c) spell
# them out as "<key>=null": the same run.
NULL_DEFAULT_BUDGETS = ("max_flops", "data_epochs")


def stage_overrides(overrides: list[str]) -> list[str]:
    """A stage record's overrides as plans write them now (restated null budgets dropped)."""
    restated = {f"{key}=null" for key in NULL_DEFAULT_BUDGETS}
    return [o for o in overrides if o not in restated]


# --- run artefacts ------------------------------------------------------------------------------------------------
# Objectives that existed before summary.json named `val_loss_kind` (23 November 2026, 660408b), and the tokens
# their val/loss averaged.
HISTORICAL_VAL_LOSS_KINDS = {"AutoregressiveLM": "next_token", "MaskedLM": "masked_token",
                             "MaskedLMWithNSP": "masked_token"}
# summary.json keys that older writers did not write; absent, they are unknown (None): train_tokens, epochs and
# max_train_tokens from 22-23 November 2026 (0ecfd1c, 100458b), flops_seen and val_likelihood from 23 November
# (2050486), val_likelihood_tag from 24 November (a0303bc), precision from 25 November (327a5be), train_words and
# words_seen from 27 November (issue 47; a token cache built before then counts no words, so a run on it has none).
# branch_from from 27 November too (training.branches): older runs were no branches.
SUMMARY_KEYS_ADDED = ("train_tokens", "epochs", "max_train_tokens", "flops_seen", "val_likelihood",
                      "val_likelihood_tag", "precision", "train_words", "words_seen", "branch_from")


def migrate_summary_metrics(metrics: dict[str, float]) -> dict[str, float]:
    """A summary's validation metrics. A mixture from before 26 November 2026 (84eb11d) logged only its components'
    [MASK] shares, not `val/mask_share` over all rows: that share is unknown (NaN), never 0."""
    if "val/mask_share" not in metrics and any(key.endswith("mask_share") for key in metrics):
        return {**metrics, "val/mask_share": math.nan}
    return metrics


def approximate_own_margins(summary: dict[str, Any]) -> dict[str, float] | None:
    """The learning gate's quantity for a summary written before it was logged (issue 46): the objective's own
    held-out loss (val/nelbo where logged, else val/loss; a mixture's components their val/loss_<name>) below the
    validation unigram baseline of all tokens, not of exactly the targets that loss scored. For uniformly drawn
    targets the two baselines agree in expectation; reports mark these margins approximate."""
    metrics, unigram = summary.get("metrics") or {}, summary.get("unigram_baseline")
    own = metrics.get("val/nelbo", summary.get("val_loss"))
    if unigram is None or own is None:
        return None
    margins = {"all": unigram - own}
    margins |= {tag.removeprefix("val/loss_"): unigram - value for tag, value in metrics.items()
                if tag.startswith("val/loss_")}
    return margins


def migrate_summary(summary: dict[str, Any]) -> dict[str, Any]:
    """A pretraining run's summary.json in the current format (a new dict); `own_below_unigram_approximate` says
    whether its own-loss margins are approximate_own_margins'."""
    out = {key: None for key in SUMMARY_KEYS_ADDED} | summary
    if not out.get("val_loss_kind") and out.get("objective") in HISTORICAL_VAL_LOSS_KINDS:
        out["val_loss_kind"] = HISTORICAL_VAL_LOSS_KINDS[out["objective"]]
    if isinstance(out.get("metrics"), dict):
        out["metrics"] = migrate_summary_metrics(out["metrics"])
    margins = out.get("own_below_unigram")
    out["own_below_unigram_approximate"] = not margins
    out["own_below_unigram"] = margins or approximate_own_margins(out)
    return out


def migrate_finetune_results(result: dict[str, Any]) -> dict[str, Any]:
    """A fine-tuning run's results.json in the current format (a new dict): `input_mask_share` None (unknown) before
    21 November 2026 (cb3d401), `primary_metric` its task's historical one before schema version 2."""
    out = {"input_mask_share": None} | result
    if not out.get("primary_metric"):
        out["primary_metric"] = task_info_defaults({"name": result["task"]})["primary_metric"]
    return out


def migrate_stage_record(record: dict[str, Any]) -> dict[str, Any]:
    """A study stage's stage.json: `seconds` (summed over launches) None, unknown, before 25 November 2026
    (bdc210e); overrides as plans write them now (stage_overrides)."""
    out = {"seconds": None} | record
    if isinstance(out.get("overrides"), list):
        out["overrides"] = stage_overrides(out["overrides"])
    return out


# diagnostics.json: likelihood keys added on 23 November 2026 (a7f398b: the blocks' fingerprint, the [EOD] share,
# whether the Monte-Carlo target was met: earlier bounds had no target) and 24 November (b102651: the unigram of
# the same targets); absent ones are unknown (None) but for target_met. The left-mask shift came on 24 November
# (b102651); the sequence score said which perplexity it holds from 23 November (1006e6f): before, AR's was `ppl`
# and a bidirectional objective's `pseudo_ppl`. Pairs were scored in their whole sentence before `pair_context`
# (23 November, 660408b).
LIKELIHOOD_KEYS_ADDED = {"nll_per_token_without_eod": None, "eod_targets": None, "blocks_fingerprint": None,
                         "target_met": True, "unigram_nll_per_token_without_eod": None, "below_unigram": None}
LEFT_SHIFT_KEYS = ("shift_left", "shift_left_read_tokens", "shift_left_masks_seen",
                   "shift_left_random")  # the random-token control, from issue 46


def migrate_diagnostics_report(report: dict[str, Any]) -> dict[str, Any]:
    """A diagnostics.json in the current format (a new dict; sections it lacks stay absent)."""
    out = {"pair_context": "sentence"} | report
    if isinstance(out.get("likelihood"), dict):
        out["likelihood"] = LIKELIHOOD_KEYS_ADDED | out["likelihood"]
    if isinstance(out.get("representations"), dict):
        out["representations"] = {key: {} for key in LEFT_SHIFT_KEYS} | out["representations"]
    sequence = out.get("sequence")
    if isinstance(sequence, dict) and not sequence.get("perplexity_kind"):
        out["sequence"] = {**sequence, "perplexity_kind": "ppl" if "ppl" in sequence else "pseudo_ppl"}
    return out


# zeroshot.json: the BLiMP release spells one field two ways (`syntax/semantics` in one paradigm's file,
# `syntax_semantics` in the others). Reports written before zeroshot.blimp.field_name (25 November 2026, bed7753)
# keep both as field rows; now they are one field, a macro over its paradigms like every other group.
BLIMP_FIELD_SPELLINGS = {"syntax/semantics": "syntax_semantics"}
_SUMMED = ("pairs", "paradigms")  # counts add up; a bootstrap interval of the merged field was never drawn
_UNKNOWN = ("ci_low", "ci_high")


def _merge_field_rows(rows: list[dict[str, Any]], weights: dict[str, int]) -> list[dict[str, Any]]:
    """Field rows under their current names, those of one field merged where its first spelling stood: values
    weighted by `weights` (name -> paradigms; 1 where absent), counts summed."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        if row["level"] == "field":
            groups.setdefault(BLIMP_FIELD_SPELLINGS.get(row["name"], row["name"]), []).append(row)
    out = []
    for row in rows:
        name = BLIMP_FIELD_SPELLINGS.get(row["name"], row["name"])
        parts = groups.get(name) if row["level"] == "field" else None
        if parts is None or (len(parts) == 1 and name == row["name"]):
            out.append(row)
        elif row is parts[0]:
            total = sum(weights.get(p["name"], 1) for p in parts)
            merged = {"level": "field", "name": name}
            for key in (k for k in row if k not in ("level", "name")):
                merged[key] = (sum(p[key] for p in parts) if key in _SUMMED else None if key in _UNKNOWN else
                               sum(p[key] * weights.get(p["name"], 1) for p in parts) / total)
            out.append(merged)
    return out


def migrate_zeroshot_report(report: dict[str, Any]) -> dict[str, Any]:
    """A zeroshot.json with one row per BLiMP field (a new dict where it had two spellings). The release's models'
    rows are weighted by the paradigms of the first scoring method's fields, as their table always was."""
    blimp = report.get("blimp")
    if not isinstance(blimp, dict) or not any(
            row["level"] == "field" and row["name"] in BLIMP_FIELD_SPELLINGS
            for rows in [*blimp.get("results", {}).values(), blimp.get("published", [])] for row in rows):
        return report

    def paradigms(rows: list[dict[str, Any]]) -> dict[str, int]:
        return {r["name"]: r["paradigms"] for r in rows if r["level"] == "field"}

    results = blimp.get("results", {})
    first = paradigms(next(iter(results.values()), []))
    migrated = {**blimp, "results": {m: _merge_field_rows(rows, paradigms(rows)) for m, rows in results.items()}}
    if "published" in blimp:
        migrated["published"] = _merge_field_rows(blimp["published"], first)
    return {**report, "blimp": migrated}
