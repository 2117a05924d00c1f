"""records/rewrite_schema3.py: each kind of run or study artefact from before schema 3 is rewritten once into
today's format (what the read-time shims gave before), a current artefact only gains nothing, running it twice
changes nothing, and readers refuse an artefact that was not rewritten, naming the script."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

from armlm.common.atomic import read_artefact
from armlm.common.migrations import SCHEMA_VERSION

REPO = Path(__file__).resolve().parents[1]
SPEC = importlib.util.spec_from_file_location("rewrite_schema3", REPO / "records" / "rewrite_schema3.py")
rewrite = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(rewrite)


def rewritten(name: str, old: dict) -> dict:
    new = rewrite.rewritten(name, old)
    assert list(new)[0] == "schema_version" and new["schema_version"] == SCHEMA_VERSION
    assert rewrite.rewritten(name, new) == new  # twice: nothing more
    return new


def test_the_script_writes_the_version_today_s_readers_read():
    assert rewrite.VERSION == SCHEMA_VERSION


def test_an_old_summary_gets_its_objective_s_val_loss_kind_and_unknown_keys_as_none():
    new = rewritten("summary.json", {"objective": "MaskedLMWithNSP", "val_loss": 5.0, "metrics": {"val/loss": 5.0}})
    assert new["val_loss_kind"] == "masked_token"
    assert rewritten("summary.json", {"objective": "AutoregressiveLM"})["val_loss_kind"] == "next_token"
    for key in rewrite.SUMMARY_KEYS_ADDED:
        assert new[key] is None
    assert "val_loss_kind" not in rewritten("summary.json", {"objective": "SomeoneElsesLM"})  # no guess
    current = {"objective": "PermutationLM", "val_loss_kind": "permuted_last_share", "precision": "32-true",
               **{key: 1.0 for key in rewrite.SUMMARY_KEYS_ADDED if key != "precision"},
               "metrics": {"val/mask_share": 0.0}, "own_below_unigram": {"all": 1.5}}
    assert rewritten("summary.json", current) == {"schema_version": SCHEMA_VERSION, **current,
                                                  "own_below_unigram_approximate": False}


def test_an_old_summary_s_own_margins_are_approximated_against_the_validation_unigram():
    diffusion = rewritten("summary.json", {"objective": "MaskedDiffusionLM", "val_loss": 5.1, "unigram_baseline": 5.8,
                                           "metrics": {"val/loss": 5.1, "val/nelbo": 4.7}})
    assert diffusion["own_below_unigram"] == {"all": pytest.approx(1.1)} and diffusion["own_below_unigram_approximate"]
    mixture = rewritten("summary.json", {"objective": "HybridLM", "val_loss": 5.0, "unigram_baseline": 6.0,
                                         "metrics": {"val/loss_masked": 4.8, "val/loss_causal": 5.6}})
    assert mixture["own_below_unigram"] == pytest.approx({"all": 1.0, "masked": 1.2, "causal": 0.4})
    assert rewritten("summary.json", {"objective": "X"})["own_below_unigram"] is None  # nothing to approximate from


def test_a_mixture_that_logged_only_its_components_mask_shares_has_an_unknown_share():
    old = rewritten("summary.json", {"metrics": {"val/masked_mask_share": 0.12}})["metrics"]
    assert math.isnan(old["val/mask_share"])
    both = {"val/mask_share": 0.11, "val/masked_mask_share": 0.12}
    assert rewritten("summary.json", {"metrics": both})["metrics"] == both
    assert rewritten("summary.json", {"metrics": {"val/loss": 3.0}})["metrics"] == {"val/loss": 3.0}  # AR: none


def test_old_results_get_their_task_s_historical_primary_metric():
    new = rewritten("results.json", {"task": "stsb", "metrics": {"validation": {"pearson": 0.5}}})
    assert new["primary_metric"] == "pearson" and new["input_mask_share"] is None
    current = {"task": "toy_polarity", "primary_metric": "mcc", "input_mask_share": 0.0}
    assert rewritten("results.json", current) == {"schema_version": SCHEMA_VERSION, **current}


def test_an_old_stage_record_has_unknown_seconds_and_its_overrides_as_plans_write_them():
    old = rewritten("stage.json", {"kind": "pretrain", "overrides": ["objective=ar", "max_flops=null",
                                                                     "data_epochs=null", "max_flops=1e15"]})
    assert old["seconds"] is None and old["overrides"] == ["objective=ar", "max_flops=1e15"]


def test_an_old_diagnostics_report_names_its_perplexity_and_has_every_current_key():
    new = rewritten("diagnostics.json", {"sequence": {"pseudo_ppl": 30.0, "sentences": 2},
                                         "likelihood": {"kind": "bound", "nll_per_token": 4.0},
                                         "representations": {"shift": {"0.4": []}, "geometry": []}})
    assert new["sequence"]["perplexity_kind"] == "pseudo_ppl"
    assert rewritten("diagnostics.json", {"sequence": {"ppl": 3.0}})["sequence"]["perplexity_kind"] == "ppl"
    assert new["likelihood"]["target_met"] is True and new["likelihood"]["blocks_fingerprint"] is None
    assert new["likelihood"]["below_unigram"] is None and new["likelihood"]["nll_per_token"] == 4.0
    assert new["representations"]["shift_left"] == {} and new["representations"]["shift"] == {"0.4": []}
    assert new["pair_context"] == "sentence"  # before pair_context, pairs were scored in their whole sentence
    assert "likelihood" not in rewritten("diagnostics.json", {"pair_context": "prefix", "pairwise": {}})


def group(name: str, accuracy: float, paradigms: int, level: str = "field") -> dict:
    return {"level": level, "name": name, "accuracy": accuracy, "ci_low": 0.0, "ci_high": 1.0,
            "pairs": 50 * paradigms, "paradigms": paradigms}


def test_a_blimp_field_spelled_two_ways_becomes_one_macro_over_its_paradigms():
    rows = [group("overall", 0.5, 3, "overall"), group("morphology", 0.6, 2), group("syntax/semantics", 0.9, 1),
            group("syntax_semantics", 0.3, 2), group("npi", 0.4, 3, "phenomenon")]
    published = [{"level": "field", "name": "syntax/semantics", "GPT-2": 0.6},
                 {"level": "field", "name": "syntax_semantics", "GPT-2": 0.9}]
    new = rewritten("zeroshot.json", {"checkpoint": "x", "blimp": {"results": {"pll": rows}, "published": published}})
    fields = [r for r in new["blimp"]["results"]["pll"] if r["level"] == "field"]
    assert [r["name"] for r in fields] == ["morphology", "syntax_semantics"]
    assert fields[1]["accuracy"] == pytest.approx((0.9 + 2 * 0.3) / 3)
    assert fields[1]["paradigms"] == 3 and fields[1]["pairs"] == 150 and fields[1]["ci_low"] is None
    assert fields[0] == rows[1]  # one spelling: the row as it was
    assert new["blimp"]["published"] == [{"level": "field", "name": "syntax_semantics",
                                          "GPT-2": pytest.approx((0.6 + 2 * 0.9) / 3)}]


def test_a_folder_is_rewritten_in_place_once_and_readers_refuse_what_was_not(tmp_path):
    summary = tmp_path / "ar" / "seed1" / "pretrain" / "summary.json"
    summary.parent.mkdir(parents=True)
    summary.write_text(json.dumps({"objective": "AutoregressiveLM", "val_loss": 4.0}, indent=2))
    items = tmp_path / "ar" / "seed1" / "finetune" / "items.json"
    items.parent.mkdir(parents=True)
    items.write_text(json.dumps({"schema_version": 2, "epochs": [[1, 2]]}))
    frozen = tmp_path / "report" / "kept.json"  # a frozen report's files are never rewritten
    frozen.parent.mkdir()
    frozen.write_text("{}")
    with pytest.raises(ValueError, match=r"schema version 1, older than today's 3; .*rewrite_schema3.py"):
        read_artefact(summary)
    assert rewrite.rewrite_folder(tmp_path) == 2
    assert read_artefact(summary)["val_loss_kind"] == "next_token"
    assert summary.read_text().startswith('{\n  "schema_version": 3')  # indented as it was; compact stays compact
    assert items.read_text() == '{"schema_version":3,"epochs":[[1,2]]}' and frozen.read_text() == "{}"
    assert rewrite.rewrite_folder(tmp_path) == 0  # twice: nothing left to do


@pytest.mark.slow
def test_every_kept_record_was_rewritten():
    """The records are read by today's code: every artefact under records/ is in today's schema."""
    old = [p for p in (REPO / "records").rglob("*.json") if p.name in rewrite.ARTEFACTS and "report" not in p.parts
           and json.loads(p.read_text()).get("schema_version", 1) < SCHEMA_VERSION]
    assert not old, f"{len(old)} artefacts older than schema {SCHEMA_VERSION}, e.g. {old[0]}"
