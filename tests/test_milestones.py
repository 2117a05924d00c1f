"""training.milestones: checkpoints at word milestones as BabyLM counts words, its 2025 schedule, and its 10-pass
limit."""

from __future__ import annotations

import json
import math
import shutil

import pytest
import torch

from common.errors import ArmlmError
from tests.helpers.configs import tiny_config
from training.milestones import BABYLM, MILLION, babylm_schedule, milestone_name, word_points
from training.run import run_pretraining


def test_the_2025_schedule_is_every_1m_to_10m_every_10m_to_100m_every_100m_to_1b():
    whole = babylm_schedule(1_000 * MILLION)
    assert whole[:10] == [k * MILLION for k in range(1, 11)]
    assert whole[10:19] == [k * 10 * MILLION for k in range(2, 11)]
    assert whole[19:] == [k * 100 * MILLION for k in range(2, 11)] and len(whole) == 28
    assert babylm_schedule(10 * MILLION) == [k * MILLION for k in range(1, 11)]  # strict-small
    assert babylm_schedule(2.5 * MILLION) == [MILLION, 2 * MILLION]
    assert [milestone_name(w) for w in (MILLION, 20 * MILLION, 1_000 * MILLION, 1_500_000)] == [
        "chck_1M", "chck_20M", "chck_1000M", "chck_1.5M"]


def test_a_milestone_is_the_first_token_count_that_holds_its_words():
    # 0.75 words a token: 1M words need 1,333,334 tokens (1,333,333 hold 999,999.75)
    points = word_points(BABYLM, 0.75, 40 * MILLION, epochs=4)
    assert points[MILLION] == 1_333_334 and math.floor(1_333_333 * 0.75) < MILLION <= 1_333_334 * 0.75
    assert list(points) == [k * MILLION for k in range(1, 11)] + [20 * MILLION, 30 * MILLION]
    assert word_points([500, 1000], 0.5, 4000, epochs=1) == {500: 1000, 1000: 2000}


def test_a_babylm_budget_over_ten_passes_and_a_milestone_past_the_budget_are_refused():
    with pytest.raises(ArmlmError, match="at most 10"):
        word_points(BABYLM, 0.75, 40 * MILLION, epochs=10.5)
    with pytest.raises(ArmlmError, match="between 0 and the budget"):
        word_points([5_000], 0.5, 4000, epochs=1)


@pytest.mark.slow
def test_a_run_saves_a_checkpoint_at_each_word_milestone(tmp_path, cache_dir):
    """8 steps of 8 x 32 tokens (2,048, about 600 words of the tiny corpus): milestones at 150 and 450 words."""
    out = tmp_path / "run"
    summary = run_pretraining(tiny_config(out, cache_dir, "save_at_words=[150,450]"))
    words_per_token = summary["words_seen"] / summary["tokens_seen"]
    tokens_at = {w: math.ceil(w / words_per_token) for w in (150, 450)}
    assert summary["word_milestones"] == {milestone_name(w): n for w, n in tokens_at.items()}
    for words, tokens in tokens_at.items():
        saved = torch.load(out / "checkpoints" / f"words-{words}.ckpt", weights_only=True)
        seen = saved["global_step"] * 8 * 32  # written at the first step end at or past the milestone, never before
        assert tokens <= seen < tokens + 8 * 32, (words, tokens, seen)
    assert json.loads((out / "summary.json").read_text())["word_milestones"] == summary["word_milestones"]


@pytest.mark.parametrize("setting", ["save_at_words=soon", "save_at_words=[0]", "save_at_words=[1.5]"])
def test_a_malformed_milestone_setting_is_refused_before_any_data(tmp_path, setting):
    with pytest.raises(ArmlmError, match="save_at_words=.*give word counts"):
        run_pretraining(tiny_config(tmp_path / "run", tmp_path / "no-cache", setting))
    assert not (tmp_path / "no-cache").exists()


@pytest.mark.slow
@pytest.mark.parametrize(("objective", "backend", "auto"), [("ar", "causal", "AutoModelForCausalLM"),
                                                           ("mlm", "mlm", "AutoModelForMaskedLM")])
def test_each_milestone_exports_as_a_chck_folder_whose_card_names_its_backend(tmp_path, cache_dir, objective, backend,
                                                                              auto):
    import transformers

    from interchange.export import export_milestones

    run = tmp_path / "run"
    run_pretraining(tiny_config(run, cache_dir, f"objective={objective}", "save_at_words=[150,450]"))
    results = export_milestones(run, tmp_path / "babylm")
    assert [r.out.name for r in results] == ["chck_0.00015M", "chck_0.00045M"]
    for result in results:
        card = (result.out / "README.md").read_text()
        assert f"| BabyLM 2025 pipeline backend | `{backend}` (its `--backend {backend}`) |" in card
        model = getattr(transformers, auto).from_pretrained(result.out, trust_remote_code=True)
        assert model.config.vocab_size > 0


def test_milestone_exports_are_refused_in_one_line_without_milestones_or_a_backend(tmp_path, untrained):
    from interchange.export import export_milestones

    with pytest.raises(ArmlmError, match="saved no word-milestone checkpoint"):
        export_milestones(untrained["ar"], tmp_path / "out")
    plm = tmp_path / "plm"  # no BabyLM backend reads a permutation LM (a copy: the fixture is the session's)
    shutil.copytree(untrained["plm"], plm)
    (plm / "checkpoints" / "words-1000.ckpt").write_bytes((plm / "checkpoints" / "last.ckpt").read_bytes())
    with pytest.raises(ArmlmError, match="no backend of the BabyLM 2025 pipeline reads"):
        export_milestones(plm, tmp_path / "out")
    assert not (tmp_path / "out").exists()
