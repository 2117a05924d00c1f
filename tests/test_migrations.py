"""common.migrations: each checkpoint shim turns a hand-written checkpoint part of an older format into the current
one, leaves a current one as it is (so applying it twice changes nothing), and schema versions read and stamp as
writers expect. Run and study artefacts are rewritten once instead (tests/test_rewrite_schema3.py)."""

from __future__ import annotations

import copy

from armlm.common.migrations import (
    SCHEMA_VERSION,
    migrate_finetune_hparams,
    migrate_pretraining_checkpoint,
    migrate_token_accounting_state,
    schema_version,
    task_info_defaults,
    versioned,
)


def unchanged(migrate, current):
    """A current artefact passes through equal, and the input is not modified."""
    before = copy.deepcopy(current)
    assert migrate(copy.deepcopy(current)) == before
    assert current == before


def test_schema_version_reads_one_for_unversioned_artefacts_and_versioned_puts_the_current_one_first():
    assert schema_version({}) == 1 and schema_version({"schema_version": 2}) == 2
    stamped = versioned({"a": 1, "schema_version": 1, "b": 2})
    assert list(stamped) == ["schema_version", "a", "b"] and stamped["schema_version"] == SCHEMA_VERSION
    assert versioned(stamped) == stamped and schema_version(stamped) == SCHEMA_VERSION


def test_old_fine_tuning_hyperparameters_read_under_the_current_keys():
    old = {"settings": {"mode": "full", "causal": False, "pooling": "first"},
           "pretrained": {"objective": "MaskedLM", "causal": False}, "task": {"name": "cola"}, "seed": 1}
    new = migrate_finetune_hparams(old)
    assert new["settings"] == {"mode": "full", "attention": "bidirectional", "pooling": "first", "features": "concat",
                               "word_subword": "first"}  # every tagger read first subwords before issue 46
    assert new["pretrained"] == {"objective": "MaskedLM", "finetune_attention": "bidirectional"}
    assert new["task"] == task_info_defaults({"name": "cola"}) and new["task"]["primary_metric"] == "mcc"
    assert new["seed"] == 1 and old["settings"]["causal"] is False  # a new dict
    unchanged(migrate_finetune_hparams, new)
    static = {"task": {"name": "conll2003", "metrics": {}, "primary_metric": "f1"}, "vectors": "x", "seed": 1}
    unchanged(migrate_finetune_hparams, static)  # static vectors: no settings, nothing added


def test_an_old_pretraining_checkpoint_hands_its_data_position_over_and_names_what_it_lacked():
    old = {"data_position": {"epoch": 2, "batches": 7}}
    assert migrate_pretraining_checkpoint(old) is old  # in place, as Lightning hands it over
    assert old["PretrainDataModule"] == {"epoch": 2, "batches": 7}
    assert old["skipped_batches"] == 0 and old["trained_length"] is None
    current = {"PretrainDataModule": {"epoch": 3, "batches": 1}, "skipped_batches": 2, "trained_length": 64}
    unchanged(migrate_pretraining_checkpoint, current)


def test_old_token_accounting_state_leaves_flops_and_phase_starts_unknown():
    old = migrate_token_accounting_state({"tokens_seen": 10, "pred_tokens_seen": 3})
    assert old["flops_seen"] is None and old["phase_starts"] is None and old["tokens_seen"] == 10
    unchanged(migrate_token_accounting_state,
              {"tokens_seen": 10, "pred_tokens_seen": 3, "flops_seen": 5.0, "phase_starts": {"ar": 0}})
