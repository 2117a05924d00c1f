"""The learning gate of a study's findings (analysis.findings.gate): each arm read by its own held-out loss, a mixture by
every component, and BLiMP sides by whether their preferences differ from coin flips."""

import json
from pathlib import Path

import numpy as np
import pytest

from armlm.analysis.findings.gate import coin_flip_p_value, paradigm_counts
from armlm.analysis.findings.registrations import StudySpec
from tests.helpers.findings import FINDINGS, gate_report, judged, write

REPO = Path(__file__).resolve().parents[1]
OWN = {"arms": {"mlm": {}, "ar": {}}, "gate": {"own_below_unigram": 0.5}}
ROWS = {k: FINDINGS[k] for k in ("bidirectional", "backwards")}


def own_summary(root: Path, arm: str, seed: int, margins: dict[str, float] | None, **written) -> None:
    """A pretraining summary whose own-loss margins are `margins` (None: none logged)."""
    summary = {"objective": "X", "steps": 10, "tokens_seen": 1000, "pred_tokens_seen": 900, "val_loss": 4.0,
               "val_loss_kind": "masked_token", "unigram_baseline": 6.0, "wall_seconds": 1.0, "metrics": {},
               "own_below_unigram": margins, **written}
    write(root / arm / f"seed{seed}" / "pretrain" / "summary.json", summary)


def test_the_own_gate_passes_a_bidirectional_arm_whose_loose_bound_fails_the_common_scale(study):
    for seed in (1, 2, 3):
        gate_report(study, "mlm", seed, 0.3)  # the any-order bound's margin: loose, under 0.5
        gate_report(study, "ar", seed, 2.0)
        own_summary(study, "mlm", seed, {"all": 2.1})
        own_summary(study, "ar", seed, {"all": 1.9})
    common = {**OWN, "gate": {"min_below_unigram": 0.5}}
    assert list(judged(study, ROWS, **common)["verdict"]) == ["not evidence", "not evidence"]
    table = judged(study, ROWS, **OWN)
    assert list(table["verdict"]) == ["reproduced", "contradicted"] and table["gate"].tolist() == [1.9, 1.9]
    own_summary(study, "ar", 2, {"all": 0.4})  # and the other way: an arm that did not learn its own objective
    table = judged(study, ROWS, **OWN)
    assert list(table["verdict"]) == ["not evidence", "not evidence"]
    assert "ar seed 2 is 0.40 nats below unigram by its own loss (gate 0.5)" in table["gate_note"].iloc[0]


def test_a_mixture_must_clear_the_gate_with_every_component(study):
    for seed in (1, 2, 3):
        own_summary(study, "ar", seed, {"all": 1.9})
        own_summary(study, "mlm", seed, {"all": 0.95, "masked": 1.0, "causal": 0.45 if seed == 2 else 0.8})
    table = judged(study, ROWS, **OWN)
    assert (table["verdict"] == "not evidence").all() and table["gate"].tolist() == [0.45, 0.45]
    own_summary(study, "mlm", 2, {"all": 0.95, "masked": 1.0, "causal": 0.6})
    assert list(judged(study, ROWS, **OWN)["verdict"]) == ["reproduced", "contradicted"]


def test_the_share_gate_reads_each_margin_against_its_own_baseline(study):
    """ELECTRA's detection loss (a baseline of at most 0.69 nats) and an MLM's masked-token loss (about 6) are gated
    on the share of their baselines they remove, so one registered number judges both."""
    for seed in (1, 2, 3):
        own_summary(study, "ar", seed, {"all": 0.05}, metrics={"val/own_unigram": 0.35})  # an RTD loss: 14 %
        own_summary(study, "mlm", seed, {"all": 2.1}, metrics={"val/own_unigram": 5.8})  # 36 %
    share = {**OWN, "gate": {"own_share_below_unigram": 0.08}}
    table = judged(study, ROWS, **share)
    assert list(table["verdict"]) == ["reproduced", "contradicted"]
    assert table["gate"].tolist() == pytest.approx([0.05 / 0.35] * 2)
    assert list(judged(study, ROWS, **OWN)["verdict"]) == ["not evidence"] * 2  # in nats the RTD arm fails 0.5
    own_summary(study, "ar", 2, {"all": 0.02}, metrics={"val/own_unigram": 0.35})  # 5.7 %: has not learned
    table = judged(study, ROWS, **share)
    assert (table["verdict"] == "not evidence").all()
    assert "ar seed 2 is 5.7% of its baseline below it by its own loss (gate 0.08)" in table["gate_note"].iloc[0]
    own_summary(study, "ar", 2, {"all": 0.05})  # a summary without its baseline cannot pass
    assert "ar seed 2 has no own held-out loss and its baseline" in judged(study, ROWS, **share)["gate_note"].iloc[0]


def test_a_gate_registers_exactly_one_margin():
    for gate in ({"own_below_unigram": 0.5, "own_share_below_unigram": 0.08}, {"min_above_majority": 0.05}):
        with pytest.raises(ValueError, match="study.gate"):
            StudySpec.parse({"arms": {"mlm": {}}, "gate": gate, "findings": {}})
    StudySpec.parse({"arms": {"mlm": {}}, "gate": {"own_share_below_unigram": 0.08}, "findings": {}})


def coin_flips(rng: np.random.Generator, paradigms: int = 36, pairs: int = 50) -> list[tuple[int, int]]:
    return [(int(rng.binomial(pairs, 0.5)), pairs) for _ in range(paradigms)]


def test_coin_flip_preferences_fail_the_discrimination_rule_and_systematic_ones_pass():
    rng = np.random.default_rng(1)
    passed = np.mean([coin_flip_p_value(coin_flips(rng)) < 0.01 for _ in range(2000)])
    assert passed < 0.02  # about alpha: guessing is told apart from systematic preference 1 % of the time
    # Systematic preferences as AR's on the findings record: per paradigm mostly far from half, some below it.
    leaning = [(int(rng.binomial(50, p)), 50) for p in rng.choice([0.25, 0.35, 0.65, 0.8], size=36)]
    assert coin_flip_p_value(leaning) < 1e-6
    assert coin_flip_p_value([(0, 50)] * 36) == coin_flip_p_value([(50, 50)] * 36) < 1e-12  # either side: discrimination
    record = json.loads((REPO / "records/findings-cpu/ar/seed1/zeroshot/zeroshot.json").read_text())
    counts = paradigm_counts(record, "exact")
    assert len(counts) == 36 and coin_flip_p_value(counts) < 1e-6  # the kept AR run at 2.2M tokens discriminates


def blimp_report(root: Path, arm: str, seed: int, method: str, counts: list[tuple[int, int]]) -> None:
    rows = [{"level": "paradigm", "name": f"p{i}", "accuracy": k / n, "pairs": n} for i, (k, n) in enumerate(counts)]
    overall = sum(k for k, _ in counts) / sum(n for _, n in counts)
    write(root / arm / f"seed{seed}" / "zeroshot" / "zeroshot.json",
          {"blimp": {"results": {method: [{"level": "overall", "name": "overall", "accuracy": overall}, *rows]}}})


def test_a_blimp_row_whose_side_guesses_is_not_evidence_and_one_that_discriminates_is_judged(tmp_path):
    rng = np.random.default_rng(2)
    pll_vs_exact = {"direction": "greater", "a": {"arm": "mlm", "zeroshot": {"method": "pll"}},
                    "b": {"arm": "ar", "zeroshot": {"method": "exact"}}}
    gate = {"own_below_unigram": 0.5, "min_discrimination": {"alpha": 0.01}}
    for seed in (1, 2, 3):
        own_summary(tmp_path, "mlm", seed, {"all": 2.0})
        own_summary(tmp_path, "ar", seed, {"all": 2.0})
        blimp_report(tmp_path, "mlm", seed, "pll", [(int(rng.binomial(50, p)), 50) for p in [0.2, 0.9] * 18])
        blimp_report(tmp_path, "ar", seed, "exact", coin_flips(rng))
    row = judged(tmp_path, {"z": pll_vs_exact}, arms=OWN["arms"], gate=gate).iloc[0]
    assert row["verdict"] == "not evidence" and "ar: zeroshot method=exact is not told apart" in row["gate_note"]
    assert "mlm:" not in row["gate_note"]
    for seed in (1, 2, 3):
        blimp_report(tmp_path, "ar", seed, "exact", [(int(rng.binomial(50, p)), 50) for p in [0.3, 0.7] * 18])
    assert judged(tmp_path, {"z": pll_vs_exact}, arms=OWN["arms"], gate=gate).iloc[0]["gate_note"] == ""
    StudySpec.parse({"arms": OWN["arms"], "gate": gate, "findings": {}})
    with pytest.raises(ValueError, match="min_discrimination"):
        StudySpec.parse({"arms": OWN["arms"], "gate": {**gate, "min_discrimination": {"alpha": 2}}, "findings": {}})
    with pytest.raises(ValueError, match="own_below_unigram"):
        StudySpec.parse({"arms": OWN["arms"], "gate": {"min_discrimination": {"alpha": 0.01}}, "findings": {}})


def test_an_arm_reading_another_studys_checkpoint_is_gated_on_the_margins_its_diagnostics_copied(study):
    """study=embeddings: the pretraining run lives in the findings study's folder; `armlm evaluate` copies its margins."""
    for seed in (1, 2, 3):
        for arm, margin in (("mlm", 2.1), ("ar", 1.9 if seed != 3 else 0.2)):
            write(study / arm / f"seed{seed}" / "diagnostics" / "diagnostics.json",
                  {"pretraining": {"own_below_unigram": {"all": margin}, "approximate": False}})
    table = judged(study, ROWS, **OWN)
    assert (table["verdict"] == "not evidence").all() and "ar seed 3 is 0.20 nats below unigram" in table["gate_note"][0]


def test_evaluate_copies_the_own_margins_of_the_run_that_wrote_the_checkpoint(tmp_path):
    from armlm.sources.armlm import ArmlmSource

    checkpoint = tmp_path / "run" / "checkpoints" / "last.ckpt"
    checkpoint.parent.mkdir(parents=True)

    def own_margins_of(path):  # only the origin matters to the answer; the rest of a source is not read
        return ArmlmSource(origin=str(path), kind="armlm", backbone=None, reading=None, tokenizer=None, special=None,
                           longest_input=64).own_margins()

    assert own_margins_of(checkpoint) is None  # a bare checkpoint: nothing to copy
    write(tmp_path / "run" / "summary.json", {"objective": "MaskedLM", "val_loss": 3.7, "unigram_baseline": 5.8,
                                              "own_below_unigram": {"all": 2.15}})
    assert own_margins_of(checkpoint) == {"own_below_unigram": {"all": 2.15}, "approximate": False}
    write(tmp_path / "run" / "summary.json", {"objective": "MaskedLM", "own_below_unigram": {"all": 2.1},
                                              "own_below_unigram_approximate": True})  # a rewritten old summary
    assert own_margins_of(checkpoint) == {"own_below_unigram": {"all": 2.1}, "approximate": True}
