"""common.migrations: each shim turns a hand-written artefact of an older format into the current one, leaves a
current artefact as it is (so applying it twice changes nothing), and schema versions read and stamp as writers
expect."""

from __future__ import annotations

import copy
import math

import pytest

from common.migrations import (
    SCHEMA_VERSION,
    migrate_diagnostics_report,
    migrate_finetune_hparams,
    migrate_finetune_results,
    migrate_pretraining_checkpoint,
    migrate_stage_record,
    migrate_summary,
    migrate_summary_metrics,
    migrate_token_accounting_state,
    migrate_zeroshot_report,
    schema_version,
    stage_overrides,
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


def test_an_old_summary_gets_its_objective_s_val_loss_kind_and_unknown_keys_as_none():
    old = {"objective": "MaskedLMWithNSP", "val_loss": 5.0, "metrics": {"val/loss": 5.0}}
    new = migrate_summary(old)
    assert new["val_loss_kind"] == "masked_token"
    assert migrate_summary({"objective": "AutoregressiveLM"})["val_loss_kind"] == "next_token"
    for key in ("precision", "flops_seen", "val_likelihood", "val_likelihood_tag", "epochs", "train_tokens",
                "max_train_tokens", "train_words", "words_seen", "branch_from"):
        assert new[key] is None
    assert "val_loss_kind" not in old  # a new dict
    assert "val_loss_kind" not in migrate_summary({"objective": "SomeoneElsesLM"})  # no guess for an unknown one
    current = {"objective": "PermutationLM", "val_loss_kind": "permuted_last_share", "precision": "32-true",
               "flops_seen": 1e12, "val_likelihood": None, "val_likelihood_tag": None, "epochs": 0.5,
               "train_tokens": 10, "max_train_tokens": None, "train_words": 4.0, "words_seen": 2.0,
               "branch_from": {"trunk": "runs/a", "checkpoint": "runs/a/checkpoints/tokens-8.ckpt", "tokens": 8},
               "metrics": {"val/mask_share": 0.0},
               "own_below_unigram": {"all": 1.5}, "own_below_unigram_approximate": False}
    unchanged(migrate_summary, current)


def test_an_old_summary_s_own_margins_are_approximated_against_the_validation_unigram():
    diffusion = migrate_summary({"objective": "MaskedDiffusionLM", "val_loss": 5.1, "unigram_baseline": 5.8,
                                 "metrics": {"val/loss": 5.1, "val/nelbo": 4.7}})
    assert diffusion["own_below_unigram"] == {"all": pytest.approx(1.1)} and diffusion["own_below_unigram_approximate"]
    mixture = migrate_summary({"objective": "HybridLM", "val_loss": 5.0, "unigram_baseline": 6.0,
                               "metrics": {"val/loss_masked": 4.8, "val/loss_causal": 5.6}})
    assert mixture["own_below_unigram"] == pytest.approx({"all": 1.0, "masked": 1.2, "causal": 0.4})
    assert migrate_summary({"objective": "X"})["own_below_unigram"] is None  # nothing to approximate from


def test_a_mixture_that_logged_only_its_components_mask_shares_has_an_unknown_share():
    old = migrate_summary_metrics({"val/masked_mask_share": 0.12})
    assert math.isnan(old["val/mask_share"])
    assert migrate_summary_metrics(old) is old  # already migrated
    unchanged(migrate_summary_metrics, {"val/mask_share": 0.11, "val/masked_mask_share": 0.12})
    unchanged(migrate_summary_metrics, {"val/loss": 3.0})  # AR: no share at all, none invented


def test_old_results_get_their_task_s_historical_primary_metric():
    old = {"task": "stsb", "metrics": {"validation": {"pearson": 0.5}}}
    new = migrate_finetune_results(old)
    assert new["primary_metric"] == "pearson" and new["input_mask_share"] is None and "primary_metric" not in old
    with pytest.raises(ValueError, match="names no metrics"):
        migrate_finetune_results({"task": "toy_polarity"})
    unchanged(migrate_finetune_results, {"task": "toy_polarity", "primary_metric": "mcc", "input_mask_share": 0.0})


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


def test_an_old_stage_record_has_unknown_seconds_and_its_overrides_as_plans_write_them():
    old = migrate_stage_record({"kind": "pretrain", "overrides": ["objective=ar", "max_flops=null"]})
    assert old["seconds"] is None and old["overrides"] == ["objective=ar"]
    assert stage_overrides(["data_epochs=null", "max_flops=1e15"]) == ["max_flops=1e15"]
    unchanged(migrate_stage_record, {"kind": "pretrain", "overrides": ["objective=ar"], "seconds": 12.5})


def test_an_old_diagnostics_report_names_its_perplexity_and_has_every_current_key():
    old = {"sequence": {"pseudo_ppl": 30.0, "sentences": 2},
           "likelihood": {"kind": "bound", "nll_per_token": 4.0},
           "representations": {"shift": {"0.4": []}, "geometry": []}}
    new = migrate_diagnostics_report(old)
    assert new["sequence"]["perplexity_kind"] == "pseudo_ppl"
    assert migrate_diagnostics_report({"sequence": {"ppl": 3.0}})["sequence"]["perplexity_kind"] == "ppl"
    assert new["likelihood"]["target_met"] is True and new["likelihood"]["blocks_fingerprint"] is None
    assert new["likelihood"]["below_unigram"] is None and new["likelihood"]["nll_per_token"] == 4.0
    assert new["representations"]["shift_left"] == {} and new["representations"]["shift"] == {"0.4": []}
    assert "perplexity_kind" not in old["sequence"] and "shift_left" not in old["representations"]
    assert new["pair_context"] == "sentence"  # before pair_context, pairs were scored in their whole sentence
    unchanged(migrate_diagnostics_report, new)
    unchanged(migrate_diagnostics_report, {"pair_context": "prefix", "pairwise": {}})  # sections it lacks stay absent


def group(name, accuracy, paradigms, level="field"):
    return {"level": level, "name": name, "accuracy": accuracy, "ci_low": 0.0, "ci_high": 1.0,
            "pairs": 50 * paradigms, "paradigms": paradigms}


def test_a_blimp_field_spelled_two_ways_becomes_one_macro_over_its_paradigms():
    rows = [group("overall", 0.5, 3, "overall"), group("morphology", 0.6, 2), group("syntax/semantics", 0.9, 1),
            group("syntax_semantics", 0.3, 2), group("npi", 0.4, 3, "phenomenon")]
    published = [{"level": "field", "name": "syntax/semantics", "GPT-2": 0.6},
                 {"level": "field", "name": "syntax_semantics", "GPT-2": 0.9}]
    old = {"checkpoint": "x", "blimp": {"results": {"pll": rows}, "published": published}}
    new = migrate_zeroshot_report(old)
    fields = [r for r in new["blimp"]["results"]["pll"] if r["level"] == "field"]
    assert [r["name"] for r in fields] == ["morphology", "syntax_semantics"]
    merged = fields[1]
    assert merged["accuracy"] == pytest.approx((0.9 + 2 * 0.3) / 3)
    assert merged["paradigms"] == 3 and merged["pairs"] == 150 and merged["ci_low"] is None
    assert fields[0] is rows[1]  # one spelling: the row as it was
    assert new["blimp"]["published"] == [{"level": "field", "name": "syntax_semantics",
                                          "GPT-2": pytest.approx((0.6 + 2 * 0.9) / 3)}]
    assert len(old["blimp"]["results"]["pll"]) == 5  # a new dict
    unchanged(migrate_zeroshot_report, new)
    unchanged(migrate_zeroshot_report, {"blimp": {"results": {"exact": [group("overall", 0.5, 3, "overall")]}}})
