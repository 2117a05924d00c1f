"""The study tables' statistics: mean ± 95 % CI over seeds and the paired fine-tune vs feature gap; the
learning-curves figure, a panel per val/loss kind."""

import json
import math

import pandas as pd
import pytest
from matplotlib.figure import Figure
from torch.utils.tensorboard import SummaryWriter

from armlm.analysis.reports.study_plots import plot_learning_curves
from armlm.analysis.reports.study_report import study_figures, study_tables
from armlm.analysis.tables.study_tables import (
    cell,
    finetune_feature_gap,
    logged_mask_share,
    mean_ci,
    over_seeds,
    pretraining_runs,
    val_loss_kind,
)
from armlm.common.migrations import versioned


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


def test_val_loss_kind_comes_from_the_summary(tmp_path):
    assert val_loss_kind({"objective": "AutoregressiveLM", "val_loss_kind": "masked_token"}, tmp_path) == "masked_token"
    with pytest.raises(ValueError, match="val_loss_kind"):
        val_loss_kind({"objective": "AutoregressiveLM"}, tmp_path)


def pretraining_run(root, arm, seed, objective, kind, losses, unigram):
    """A finished pretraining run folder: its summary.json and the TensorBoard scalars the curves read."""
    folder = root / arm / f"seed{seed}" / "pretrain"
    with SummaryWriter(str(folder / "tensorboard")) as writer:
        for step, loss in enumerate(losses, start=1):
            writer.add_scalar("train/tokens_seen", 1000 * step, step)
            writer.add_scalar("train/pred_tokens_seen", 150 * step, step)
            writer.add_scalar("val/loss", loss, step)
    (folder / "summary.json").write_text(json.dumps(versioned({
        "objective": objective, "val_loss_kind": kind, "val_loss": losses[-1], "unigram_baseline": unigram,
        "steps": len(losses), "tokens_seen": 1000 * len(losses), "pred_tokens_seen": 150 * len(losses),
        "metrics": {}, "wall_seconds": 1.0})))


def test_learning_curves_draw_a_panel_per_val_loss_kind_with_its_own_unigram(tmp_path):
    pretraining_run(tmp_path, "ar", 1, "AutoregressiveLM", "next_token", [6.0, 5.0], 7.0)
    pretraining_run(tmp_path, "ar", 2, "AutoregressiveLM", "next_token", [6.2, 5.2], 7.0)
    pretraining_run(tmp_path, "mlm", 1, "MaskedLM", "masked_token", [7.5, 6.5], 7.0)
    pretraining_run(tmp_path, "mlm_other", 1, "MaskedLM", "masked_token", [7.8, 7.1], 7.4)  # another tokenizer
    table = pretraining_runs(tmp_path)
    axes = list(Figure().subplots(1, 2))
    plot_learning_curves(table, axes)
    assert [ax.get_title() for ax in axes] == ["val/loss kind: next_token", "val/loss kind: masked_token"]
    lines = [{line.get_label(): list(line.get_ydata()) for line in ax.get_lines()} for ax in axes]
    assert lines[0] == {"ar (AutoregressiveLM)": pytest.approx([6.1, 5.1]), "unigram baseline": [7.0, 7.0]}
    assert lines[1] == {"mlm (MaskedLM)": pytest.approx([7.5, 6.5]), "mlm_other (MaskedLM)": pytest.approx([7.8, 7.1]),
                        "unigram baseline (mlm)": [7.0, 7.0], "unigram baseline (mlm_other)": [7.4, 7.4]}
    with pytest.raises(ValueError, match="2 val/loss kinds"):
        plot_learning_curves(table, axes[:1])
    figure = study_figures(study_tables(tmp_path))["learning_curves"]  # both token axes, a column per kind
    assert [ax.get_title() for ax in figure.axes] == [
        "val/loss kind: next_token, equal input tokens", "val/loss kind: masked_token, equal input tokens",
        "val/loss kind: next_token, against predicted tokens", "val/loss kind: masked_token, against predicted tokens"]


def test_the_pretraining_table_carries_the_common_scale_from_the_likelihood_section():
    import pandas as pd

    from armlm.analysis.reports.study_report import with_common_scale

    runs = pd.DataFrame({"arm": ["ar", "mlm", "plm"], "seed": [1, 1, 1], "below_unigram": [2.0, 2.2, 1.3]})
    reports = {("ar", 1): {"likelihood": {"nll_per_token_without_eod": 3.9, "unigram_nll_per_token_without_eod": 5.8,
                                          "below_unigram": 1.9}},
               ("mlm", 1): {"likelihood": {"nll_per_token_without_eod": 4.8, "unigram_nll_per_token_without_eod": 5.8,
                                           "below_unigram": 1.0}},
               ("plm", 1): {"pairwise": {}}}  # diagnosed without a likelihood: no figure, not a guess
    table = with_common_scale(runs, reports).set_index("arm")
    assert table.loc["mlm", "heldout_below_unigram"] == 1.0 and table.loc["ar", "heldout_nll"] == 3.9
    assert pd.isna(table.loc["plm", "heldout_below_unigram"]) and len(table) == 3


@pytest.mark.parametrize("metrics,share", [({"val/mask_share": 0.11, "val/masked_mask_share": 0.12}, 0.11),
                                           ({}, 0.0), ({"val/mask_share": float("nan")}, None)])
def test_a_run_s_mask_share_is_zero_only_where_nothing_was_masked(metrics, share):
    """AR logs no share (it inserts no [MASK]); a mixture from before it logged its own share over all rows holds NaN
    (records/rewrite_schema3.py): unknown, not 0."""
    value = logged_mask_share(metrics)
    assert math.isnan(value) if share is None else value == share


def test_the_findings_report_names_the_commits_its_pretraining_runs_ran_on():
    import pandas as pd

    from armlm.analysis.tables.study_tables import code_note

    runs = pd.DataFrame({"arm": ["ar", "mlm", "ar", "mlm", "prefix_lm"], "seed": [1, 1, 2, 2, 2],
                         "code": ["unknown", "unknown", "a7440e0650d5", "a7440e0650d5", "9139e942e28d+dirty"]})
    note = code_note(runs)
    assert note == ("Code the pretraining runs ran on (their summary.json): 9139e94 (prefix_lm seed 2); "
                    "a7440e0 (ar seed 2, mlm seed 2); unknown (ar seed 1, mlm seed 1).")
    assert code_note(pd.DataFrame()) == ""
