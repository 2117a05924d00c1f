"""training.milestones: checkpoints at word milestones as BabyLM counts words, its 2025 schedule, and its 10-pass
limit."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from armlm.common.babylm import BABYLM, MILLION, babylm_schedule, milestone_name, milestone_words
from armlm.common.errors import ArmlmError
from armlm.datamodules.sampler import rank_batches
from armlm.training.milestones import optimizer_step_end_mask, stop_batch, word_points, words_by_batch
from armlm.training.run import run_pretraining
from tests.helpers.configs import tiny_config


def test_the_2025_schedule_is_every_1m_to_10m_every_10m_to_100m_every_100m_to_1b():
    whole = babylm_schedule(1_000 * MILLION)
    assert whole[:10] == [k * MILLION for k in range(1, 11)]
    assert whole[10:19] == [k * 10 * MILLION for k in range(2, 11)]
    assert whole[19:] == [k * 100 * MILLION for k in range(2, 11)] and len(whole) == 28
    assert babylm_schedule(10 * MILLION) == [k * MILLION for k in range(1, 11)]  # strict-small
    assert babylm_schedule(2.5 * MILLION) == [MILLION, 2 * MILLION]
    assert [milestone_name(w) for w in (MILLION, 20 * MILLION, 1_000 * MILLION, 1_500_000, 1_234_567, 1_234_568)] == [
        "chck_1M", "chck_20M", "chck_1000M", "chck_1.5M", "chck_1.234567M", "chck_1.234568M"]  # exact: never merged


def test_a_milestone_checkpoint_is_told_by_its_file_name_and_nothing_else_is():
    assert milestone_words("words-1000000.ckpt") == MILLION and milestone_words("words-150.ckpt") == 150
    for other in ("last.ckpt", "words-1000000-v1.ckpt", "words-.ckpt", "words-1e6.ckpt", "words-١٢.ckpt",
                  "best-step7592.ckpt", "words-100.ckpt.tmp"):
        assert milestone_words(other) is None, other


def test_a_milestone_is_the_end_of_the_first_step_whose_words_reach_it():
    seen = np.array([90, 180, 300, 410, 500])  # words by the end of steps 1..5, 100 input tokens a step
    assert word_points([180, 181, 500, 1], seen, 100, epochs=1) == {1: 100, 180: 200, 181: 300, 500: 500}
    seen = np.cumsum(np.full(40, 300_000))  # 12M words in 40 steps: 1M is reached in step 4 (1.2M)
    points = word_points(BABYLM, seen, 100, epochs=1)
    assert list(points) == [k * MILLION for k in range(1, 11)]
    assert points[MILLION] == 400 and points[10 * MILLION] == 3400  # 34 steps hold 10.2M words


def test_a_babylm_budget_over_ten_passes_and_a_milestone_past_the_budget_are_refused():
    seen = np.array([90, 180, 300, 410, 500])
    with pytest.raises(ArmlmError, match="at most 10"):
        word_points(BABYLM, seen, 100, epochs=10.5)
    with pytest.raises(ArmlmError, match="between 0 and the budget"):
        word_points([501], seen, 100, epochs=1)
    with pytest.raises(ArmlmError, match="fall in the same optimiser step"):  # 181 and 300 words: both step 3
        word_points([181, 300], seen, 100, epochs=1)


def test_with_gradient_accumulation_a_milestone_is_the_end_of_the_window_that_holds_its_words():
    ends = optimizer_step_end_mask(10, batches_per_epoch=5, accumulate=2)  # Lightning also steps at an epoch's last batch
    assert ends.tolist() == [False, True, False, True, True] * 2
    seen = np.array([90, 180, 300, 410, 500])  # words by the end of batches 1..5, 100 input tokens a batch
    assert word_points([1, 181, 500], seen, 100, epochs=1, step_ends=ends[:5]) == {1: 200, 181: 400, 500: 500}
    with pytest.raises(ArmlmError, match="same optimiser step"):  # batches 1 and 2: one window
        word_points([1, 180], seen, 100, epochs=1, step_ends=ends[:5])
    assert rank_batches(64, batch_size=8, world_size=1) == 8 and rank_batches(65, 8, 2) == 4  # ranks pad to 33


def test_a_run_stops_where_its_token_budget_or_its_step_cap_ends_an_optimiser_step():
    # 5 batches an epoch, 2 a window: optimiser steps end at batches 2, 4, 5, 7, 9, 10, ...
    assert stop_batch(10 * 100, 100, max_steps=-1, accumulate=2, batches_per_epoch=5) == 10  # the tokens' step
    assert stop_batch(9 * 100, 100, max_steps=-1, accumulate=2, batches_per_epoch=5) == 9
    assert stop_batch(8 * 100, 100, max_steps=-1, accumulate=2, batches_per_epoch=5) == 9  # inside a window: its end
    # a cap of ceil(10 / 2) = 5 steps, as set_budget_steps gives it: the partial window at batch 5 spends one
    assert stop_batch(10 * 100, 100, max_steps=5, accumulate=2, batches_per_epoch=5) == 9
    assert stop_batch(10 * 100, 100, max_steps=50, accumulate=2, batches_per_epoch=5) == 10  # a cap not reached
    assert stop_batch(7 * 100, 100, max_steps=-1, accumulate=1, batches_per_epoch=5) == 7


def test_the_words_of_each_step_follow_the_loaders_order_over_epochs_and_ranks():
    block_words = np.random.default_rng(0).integers(20, 60, size=64)
    one = words_by_batch(block_words, batch_size=8, world_size=1, seed=3, batches=20)  # 8 steps an epoch: 2.5 epochs
    assert one[7] == one[15] - one[7] == block_words.sum()  # each epoch passes over every block once
    assert one[16] - one[15] != one[0] or one[17] - one[16] != one[1] - one[0]  # a new order each epoch
    # A 2-rank run's global step holds the examples of a 1-rank run's step at twice the batch (datamodules.pretrain)
    np.testing.assert_array_equal(words_by_batch(block_words, 4, 2, seed=3, batches=20), one)
    assert not np.array_equal(words_by_batch(block_words, 8, 1, seed=4, batches=20), one)  # the seed orders them


class Counted:
    """What SaveAtWords reads of TokenAccounting: the tokens seen, and whether a point may have been reached."""

    def __init__(self, seen: int) -> None:
        self.tokens_seen = seen

    def watch(self, points: list[int]) -> None:
        pass

    def may_have_reached(self, n: int) -> bool:
        return True


class Saving:
    """What SaveAtWords reads of the trainer (one batch a window unless told) and what it calls."""

    def __init__(self, accumulate_grad_batches: int = 1) -> None:
        self.saved: list[str] = []
        self.accumulate_grad_batches, self.is_last_batch = accumulate_grad_batches, False

    def save_checkpoint(self, path, weights_only: bool | None = None) -> None:
        assert weights_only is False  # the full state, as last.ckpt holds (and no INFO line from Lightning)
        self.saved.append(path.name)
        path.write_bytes(b"")


def test_only_a_milestone_crossed_in_this_fit_is_saved(tmp_path):
    """A run resumed (or given the setting) past a milestone it never saved must not save later weights under its
    name; one saved before the stop is kept and not rewritten."""
    from armlm.training.milestones import SaveAtWords

    (tmp_path / "words-100.ckpt").write_bytes(b"kept")
    tokens, trainer = Counted(seen=500), Saving()
    callback = SaveAtWords(tokens, {100: 200, 200: 400, 300: 600}, tmp_path)  # words -> tokens
    callback.on_train_start(trainer, None)
    tokens.tokens_seen = 700
    callback.on_train_batch_end(trainer, None, None, None, 0)
    assert trainer.saved == ["words-300.ckpt"] and (tmp_path / "words-100.ckpt").read_bytes() == b"kept"
    assert callback.written() == {100: 200, 300: 600}  # words-200 (passed before this fit) was never written


def test_a_milestone_reached_inside_an_accumulation_window_is_saved_where_the_window_ends(tmp_path):
    from armlm.training.milestones import SaveAtWords

    tokens, trainer = Counted(seen=0), Saving(accumulate_grad_batches=2)
    callback = SaveAtWords(tokens, {100: 200}, tmp_path)
    callback.on_train_start(trainer, None)
    tokens.tokens_seen = 200  # reached by the window's first batch: its gradients are not applied yet
    callback.on_train_batch_end(trainer, None, None, None, 0)
    assert trainer.saved == []
    tokens.tokens_seen = 300
    callback.on_train_batch_end(trainer, None, None, None, 1)
    assert trainer.saved == ["words-100.ckpt"]


def words_trained(cfg, steps: int) -> tuple[np.ndarray, int]:
    """The oracle: the run's train loader itself, epoch by epoch, each block it feeds found in the token stream and
    its words read from the word-opening flags (held to str.split by tests/test_words.py); the words by the end of
    each batch, and the batches an epoch."""
    from armlm.training.setup import build

    datamodule = build(cfg.data, input_format="blocks", seed=cfg.seed)
    datamodule.setup("fit")
    blocks = datamodule.datasets["train"]
    index = {bytes(blocks[i]["input_ids"].numpy()): i for i in range(len(blocks))}
    words = datamodule.block_words()
    loader, per_step, epoch = datamodule.train_dataloader(), [], 0
    while len(per_step) < steps:
        loader.sampler.set_epoch(epoch)
        per_step += [sum(int(words[index[bytes(row.numpy())]]) for row in batch["input_ids"]) for batch in loader]
        epoch += 1
    return np.cumsum(per_step[:steps]), len(loader)


@pytest.mark.slow
@pytest.mark.parametrize("accumulate", [1, 2])
def test_a_run_saves_a_checkpoint_at_the_end_of_the_step_whose_words_reach_each_milestone(tmp_path, cache_dir,
                                                                                        accumulate):
    """8 optimiser steps of `accumulate` batches of 8 x 32 tokens, milestones at 150 and 450 words (both inside them),
    each saved with the weights of the first optimiser step that holds its words."""
    out = tmp_path / "run"
    cfg = tiny_config(out, cache_dir, "save_at_words=[150,450]", f"trainer.accumulate_grad_batches={accumulate}")
    summary = run_pretraining(cfg)
    seen, per_epoch = words_trained(cfg, 8 * accumulate)  # by the end of each batch
    assert per_epoch > 8 * accumulate  # inside the first epoch: optimiser step s ends at batch s * accumulate
    for words in (150, 450):
        saved = torch.load(out / "checkpoints" / f"words-{words}.ckpt", weights_only=True)
        step = saved["global_step"]  # optimiser steps applied
        assert seen[step * accumulate - 1] >= words, (words, step, seen)
        assert step == 1 or seen[(step - 1) * accumulate - 1] < words, (words, step, seen)
        assert summary["word_milestones"][milestone_name(words)] == step * accumulate * 8 * 32
    assert json.loads((out / "summary.json").read_text())["word_milestones"] == summary["word_milestones"]


@pytest.mark.parametrize(("settings", "says"), [
    (["save_at_words=soon"], "give word counts"), (["save_at_words=[0]"], "give word counts"),
    (["save_at_words=[1.5]"], "give word counts"),
    (["save_at_words=[100]", "objective=mlm_nsp"], "segment-pair inputs are padded"),
    (["save_at_words=[100]", "init_from=/some/run"], "init_from= counts from the parent"),
    (["save_at_words=[100]", "max_flops=1e12", "trainer.max_steps=-1"], "FLOPs budget's length is an estimate"),
])
def test_a_milestone_setting_that_cannot_be_honoured_is_refused_before_any_data(tmp_path, settings, says):
    with pytest.raises(ArmlmError, match=says):
        run_pretraining(tiny_config(tmp_path / "run", tmp_path / "no-cache", *settings))
    assert not (tmp_path / "no-cache").exists()


@pytest.mark.slow
@pytest.mark.parametrize(("objective", "backend", "auto"), [("ar", "causal", "AutoModelForCausalLM"),
                                                           ("mlm", "mlm", "AutoModelForMaskedLM"),
                                                           ("hybrid", "mntp", "AutoModelForMaskedLM")])
def test_each_milestone_exports_as_a_chck_folder_whose_card_names_its_backend(tmp_path, cache_dir, objective, backend,
                                                                              auto):
    import transformers

    from armlm.interchange.export import export_checkpoint, export_milestones

    run = tmp_path / "run"
    summary = run_pretraining(tiny_config(run, cache_dir, f"objective={objective}", "save_at_words=[150,450]"))
    results = export_milestones(run, tmp_path / "babylm")
    assert [r.out.name for r in results] == ["chck_0.00015M", "chck_0.00045M"]
    outputs = []
    for words, result in zip((150, 450), results, strict=True):
        card = (result.out / "README.md").read_text()
        assert f"| BabyLM 2025 pipeline backend | `{backend}` (its `--backend {backend}`) |" in card
        # the milestone's own tokens; the run's validation named as the end's, not the milestone's
        assert f"| tokens seen in pretraining | {summary['word_milestones'][result.out.name]} |" in card
        assert f"| BabyLM word milestone | {result.out.name}: saved at the end of the first optimiser step whose " \
               f"batches reach {words} words" in card
        assert (f"| validation | not recorded for this checkpoint; the run's end, at {summary['tokens_seen']} tokens: "
                f"val_loss={summary['val_loss']}") in card
        model = getattr(transformers, auto).from_pretrained(result.out, trust_remote_code=True).eval()
        with torch.no_grad():
            outputs.append(model(input_ids=torch.tensor([[2, 10, 11, 12]])).logits)
    assert not torch.allclose(*outputs)  # each folder holds its own milestone's weights, not one checkpoint twice
    end = export_checkpoint(run, tmp_path / "end")  # the run's last.ckpt: the end's own figures, no milestone
    card = (end.out / "README.md").read_text()
    assert f"| tokens seen in pretraining | {summary['tokens_seen']} |" in card and "word milestone" not in card
    assert f"| validation | val_loss={summary['val_loss']}," in card


def test_milestone_exports_are_refused_in_one_line_without_milestones_or_a_backend(tmp_path, untrained):
    from armlm.interchange.export import export_milestones

    with pytest.raises(ArmlmError, match="saved no word-milestone checkpoint"):
        export_milestones(untrained["ar"], tmp_path / "out")
    # No BabyLM backend reads a permutation LM; ELECTRA's backbone is a discriminator, no token distribution at all
    for objective, says in (("plm", "no backend of the BabyLM 2025 pipeline reads"),
                            ("electra", "Electra checkpoints are not a language model")):
        run = tmp_path / objective  # a copy: the fixture is the session's
        shutil.copytree(untrained[objective], run)
        (run / "checkpoints" / "words-1000.ckpt").write_bytes((run / "checkpoints" / "last.ckpt").read_bytes())
        with pytest.raises(ArmlmError, match=says):
            export_milestones(run, tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("objective", "says"), [
    ("ar", "`causal` (its `--backend causal`)"), ("mlm", "`mlm` (its `--backend mlm`)"),
    ("hybrid", "`mntp` (its `--backend mntp`)"),
    ("plm", "none: no backend of babylm/evaluation-pipeline-2025 reads a PermutationLM"),
    ("masked_diffusion", "none: no backend of babylm/evaluation-pipeline-2025 reads a MaskedDiffusionLM"),
])
def test_the_card_names_the_backend_that_reads_each_objective_or_says_none_does(untrained, objective, says):
    from armlm.interchange.card import babylm_backend_text
    from armlm.interchange.source import read_source

    assert babylm_backend_text(read_source(untrained[objective])) == says
