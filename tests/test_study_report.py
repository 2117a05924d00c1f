"""The study tables' statistics: mean ± 95 % CI over seeds and the paired fine-tune vs feature gap."""

import math

import pandas as pd
import pytest

from analysis.study import cell, finetune_feature_gap, mean_ci, over_seeds, val_loss_kind


def test_mean_ci_is_the_student_t_interval_and_none_for_one_seed():
    stats = mean_ci(pd.Series([1.0, 2.0, 3.0]))
    t_975_2 = 4.302652729911275  # Student t quantile, 2 degrees of freedom (tables)
    assert stats["mean"] == 2.0 and stats["n"] == 3
    assert stats["ci95"] == pytest.approx(t_975_2 * 1.0 / math.sqrt(3))
    single = mean_ci(pd.Series([0.7, None]))
    assert single["mean"] == 0.7 and single["n"] == 1 and math.isnan(single["ci95"])
    assert cell(0.5, float("nan")) == "0.500" and cell(0.5, 0.25) == "0.500 ± 0.250"


def test_over_seeds_summarises_each_group_and_quantity():
    runs = pd.DataFrame({"arm": ["ar", "ar", "mlm", "mlm"], "seed": [1, 2, 1, 2],
                         "val_loss": [5.0, 6.0, 4.0, 4.0], "val_ppl": [1.0, 3.0, 2.0, 2.0]})
    table = over_seeds(runs, ["arm"], ["val_loss", "val_ppl"]).set_index(["arm", "quantity"])
    assert table.loc[("ar", "val_loss"), "mean"] == 5.5 and table.loc[("mlm", "val_loss"), "ci95"] == 0.0
    assert table.loc[("ar", "val_ppl"), "n"] == 2 and len(table) == 4


def test_finetune_feature_gap_pairs_runs_of_the_same_seed():
    rows = [("mlm", 1, "full", 0.80), ("mlm", 1, "features", 0.70), ("mlm", 2, "full", 0.90),
            ("mlm", 2, "features", 0.60), ("ar", 1, "full", 0.75)]  # ar has no feature-based run: no gap
    table = pd.DataFrame([{"arm": a, "seed": s, "task": "sst2", "split": "dev", "metric": "accuracy",
                           "variant": v, "value": x} for a, s, v, x in rows])
    gap = finetune_feature_gap(table).sort_values("seed")
    assert list(gap["arm"]) == ["mlm", "mlm"]
    assert list(gap["value"]) == pytest.approx([0.10, 0.30])


def test_val_loss_kind_comes_from_the_summary_or_else_from_the_objective_class(tmp_path):
    assert val_loss_kind({"objective": "AutoregressiveLM", "val_loss_kind": "masked_token"}, tmp_path) == "masked_token"
    # summaries written before the kind was recorded: the objective class answers, not its name
    assert val_loss_kind({"objective": "AutoregressiveLM"}, tmp_path) == "next_token"
    assert val_loss_kind({"objective": "MaskedLMWithNSP"}, tmp_path) == "masked_token"
    with pytest.raises(ValueError, match="val_loss_kind"):
        val_loss_kind({"objective": "SomeoneElsesLM"}, tmp_path)
