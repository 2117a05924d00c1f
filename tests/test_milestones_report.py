"""BLiMP at BabyLM's word milestones (study=strict_small): the planner saves a checkpoint at each milestone of every
pretraining arm and scores each with `armlm zeroshot`; analysis/reports/milestones_report.py reads them into a
curve. End to end at a tiny size, then the report on a hand-built folder whose numbers it must reproduce."""

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from armlm.analysis.reports.milestones_report import GPT2_STRICT_SMALL_BLIMP, milestone_points, milestone_runs, plot
from armlm.common.errors import ArmlmError
from armlm.common.migrations import versioned
from armlm.studies.plan import plan
from tests.helpers.configs import study_config

REPO = Path(__file__).resolve().parents[1]
MILLION = 1_000_000


def test_every_pretraining_arm_saves_and_scores_each_milestone(tmp_path):
    stages = plan(study_config("study=strict_small", "scale=gutenwiki", "seeds=1", f"root={tmp_path}"))
    words = [k * MILLION for k in range(1, 11)]
    for arm in ("ar", "mlm", "hybrid"):
        pretrain = next(s for s in stages if s.arm == arm and s.kind == "pretrain")
        assert f"save_at_words=[{','.join(map(str, words))}]" in pretrain.overrides and "epochs" not in pretrain.label
        scored = [s for s in stages if s.arm == arm and s.kind == "zeroshot"]
        assert [s.folder.name for s in scored] == ["zeroshot", *(f"chck_{k}M" for k in range(1, 11))]
        assert all(s.needs == (pretrain.done_file,) for s in scored)  # each waits for the run that saves them
        assert f"checkpoint={pretrain.folder}/checkpoints/words-3000000.ckpt" in scored[3].overrides
        assert [s.kind for s in stages if s.arm == arm].count("finetune") == 1  # CoNLL-2003 at the last checkpoint
    assert len(stages) == 3 * (1 + 1 + 1 + 1 + 10)


@pytest.mark.parametrize("at_words", ["[2000000,1000000]", "[0]", "[1000000,1000000]", "[1.5]"])
def test_milestones_out_of_order_or_not_word_counts_are_refused(tmp_path, at_words):
    with pytest.raises(ArmlmError, match=r"study.zeroshot.at_words=.*give increasing word counts"):
        plan(study_config("study=strict_small", "scale=gutenwiki", f"root={tmp_path}", f"study.zeroshot.at_words={at_words}"))


def test_milestones_a_run_cannot_count_are_refused_before_any_stage(tmp_path):
    settings = ["study=strict_small", "scale=gutenwiki", f"root={tmp_path}"]
    with pytest.raises(ArmlmError, match=r"at_words cannot be honoured: arms \['ar_half'\] branch off a trunk"):
        plan(study_config(*settings, "+study.arms.ar_half={pretrain: ['objective=ar'], epochs: 0.5, branch_of: ar}"))
    with pytest.raises(ArmlmError, match="at_words cannot be honoured: the budget is in FLOPs"):
        plan(study_config(*settings, "budget_kind=flops", "budget=1e14", "~study.arms.ar.epochs",
                          "~study.arms.mlm.epochs", "~study.arms.hybrid.epochs"))
    unscored = plan(study_config(*settings, "+study.arms.mlm.zeroshot=false"))  # saves no milestone nothing reads
    assert not any(o.startswith("save_at_words") for s in unscored if s.arm == "mlm" for o in s.overrides)


def scored(root: Path, arm: str, seed: int, words: int, accuracy: float, ties: int) -> None:
    folder = root / arm / f"seed{seed}" / "milestones" / f"chck_{words / MILLION:g}M"
    folder.mkdir(parents=True)
    overall = {"level": "overall", "name": "overall", "accuracy": accuracy, "ci_low": accuracy - 0.02,
               "ci_high": accuracy + 0.02, "pairs": 3600, "ties": ties}
    (folder / "zeroshot.json").write_text(json.dumps(versioned({"blimp": {"results": {"exact": [overall]}}})))


def test_the_curve_reads_each_milestone_and_its_interval_over_seeds_or_pairs(tmp_path):
    for words, first, second in ((MILLION, 0.55, 0.57), (2 * MILLION, 0.58, 0.62)):
        scored(tmp_path, "ar", 1, words, first, ties=1)
        scored(tmp_path, "ar", 2, words, second, ties=2)
    scored(tmp_path, "mlm", 1, MILLION, 0.51, ties=4)
    runs = milestone_runs(tmp_path)
    assert list(runs["words"].unique()) == [MILLION, 2 * MILLION] and len(runs) == 5
    points = milestone_points(runs).set_index(["arm", "words"])
    two = points.loc[("ar", 2 * MILLION)]
    half_width = 12.706 * (0.04 / 2 ** 0.5) / 2 ** 0.5  # t(0.975, 1) x sd / sqrt(n)
    assert two["mean"] == pytest.approx(0.60) and two["high"] - two["mean"] == pytest.approx(half_width, rel=1e-3)
    assert two["ties"] == 3 and points.loc[("ar", MILLION), "ties"] == 3  # summed over seeds
    one = points.loc[("mlm", MILLION)]  # one seed: the interval over its pairs
    assert (one["n"], one["low"], one["high"], one["ties"]) == (1, pytest.approx(0.49), pytest.approx(0.53), 4)


def test_the_figure_draws_one_panel_per_arm_with_its_methods_and_the_baseline(tmp_path):
    for words in (MILLION, 2 * MILLION):
        scored(tmp_path, "ar", 1, words, 0.55, ties=0)
        scored(tmp_path, "mlm", 1, words, 0.51, ties=0)
    figure = plot(milestone_points(milestone_runs(tmp_path)))
    assert [ax.get_title() for ax in figure.axes] == ["ar", "mlm"]
    assert len({ax.get_lines()[0].get_color() for ax in figure.axes}) == 1  # one method, one colour in every panel
    for ax in figure.axes:
        assert [text.get_text() for text in ax.get_legend().get_texts()] == ["exact"]
        assert GPT2_STRICT_SMALL_BLIMP in {line.get_ydata()[0] for line in ax.get_lines()}


@pytest.mark.slow
def test_a_tiny_strict_small_run_scores_every_milestone_and_draws_the_curve(tmp_path, data_dir, cache_dir):
    """AR at 20,000 tokens (about 3,700 words of a 300-token vocabulary) with milestones at 1,000 and 2,000 words:
    both checkpoints saved, each scored on BLiMP, the final one fine-tuned, and report/milestones.md with a column per
    milestone beside the GPT-2 baseline."""
    root, quiet = tmp_path / "strict_small", '"trainer.enable_progress_bar=false"'
    done = subprocess.run(
        [sys.executable, "-m", "armlm", "study", "study=strict_small", "scale=smoke", "seeds=1",
         "~study.arms.mlm", "~study.arms.hybrid", "~study.arms.ar.epochs", "budget=20000", f"root={root}", "launcher=in_process",
         "study.zeroshot.at_words=[1000,2000]", "tasks=[conll2003]", 'study.zeroshot.settings=["blimp.max_pairs=2"]',
         f'extra_pretrain=[{quiet},"data.cache_dir={cache_dir}","data.tokenizer.vocab_size=300"]',
         'study.finetune_settings=["task.data.max_train_examples=32","task.data.max_eval_examples=32","task.epochs=1"]',
         'extra_diagnose=["likelihood.blocks=4","likelihood.max_draws=4"]'],
        cwd=REPO, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((root / "ar" / "seed1" / "pretrain" / "summary.json").read_text())
    assert list(summary["word_milestones"]) == ["chck_0.001M", "chck_0.002M"]
    for name in ("chck_0.001M", "chck_0.002M"):
        report = json.loads((root / "ar" / "seed1" / "milestones" / name / "zeroshot.json").read_text())
        assert report["checkpoint"]["checkpoint"].endswith(f"words-{int(float(name[5:-1]) * MILLION)}.ckpt")
    table = pd.read_csv(root / "report" / "milestones.csv")
    assert list(table["words"]) == [1000, 2000] and set(table["method"]) == {"exact"}
    text = (root / "report" / "milestones.md").read_text()
    assert "| ar | exact | 1 |" in text and "0.001M" in text and f"{GPT2_STRICT_SMALL_BLIMP:.4f}" in text
    assert (root / "report" / "milestones.png").stat().st_size > 10_000
    assert (root / "ar" / "seed1" / "finetune" / "conll2003-full" / "results.json").is_file()
