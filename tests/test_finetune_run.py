"""Tiny end-to-end fine-tuning from tiny pretraining checkpoints, through train.py's config and CLI."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from armlm.common.migrations import migrate_finetune_hparams
from armlm.datamodules.conll import read_conll
from armlm.finetune.run import resolve_settings, run_finetune, trained_max_length
from armlm.sources.armlm import ArmlmSource
from armlm.sources.base import Reading
from armlm.training.nonfinite import NonFiniteGradientError
from armlm.training.pretrained import load_pretrained
from tests.helpers.configs import QUICK, composed_config, finetune_config
from tests.helpers.learning import SpoilGradients, assert_checkpoints_all_at, logged_scalars, with_callbacks

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def rte_slice(tmp_path_factory, data_dir) -> Path:
    """A GLUE folder whose RTE train and dev are both the first 64 training pairs of the real file."""
    root = tmp_path_factory.mktemp("glue")
    (root / "RTE").mkdir()
    lines = (data_dir / "glue" / "RTE" / "train.tsv").read_text(encoding="utf-8").splitlines()[:65]
    for split in ("train", "dev"):
        (root / "RTE" / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def older_keys(saved: dict) -> dict:
    """The groups of an older checkpoint's hyperparameters that read otherwise after migration."""
    return {k: v for k, v in migrate_finetune_hparams(saved).items() if saved.get(k) != v}


def test_rte_slice_is_fitted_beyond_the_majority_baseline(tmp_path, tiny_pretrained, rte_slice):
    """RTE's real dev set is out of reach for a tiny model (BERT-base gets ~66%), so this checks that the
    whole pipeline (reading, pair encoding, causal last-token pooling, head, loss, metric) can fit a slice."""
    cfg = finetune_config(tmp_path, "task=rte", f"pretrained={tiny_pretrained['ar']}", f"task.data.source={rte_slice}",
                          "task.epochs=12", "task.optim.lr=2e-3", "task.data.max_length=64")
    results = run_finetune(cfg)
    assert results["attention"] == "causal" and results["pooling"] == "last"  # the AR backbone's own mode
    assert results["primary_metric"] == "accuracy"  # the task's config names it; reports read it from here
    accuracy, baseline = results["metrics"]["dev"]["accuracy"], results["majority_baseline"]["dev"]["accuracy"]
    labels = [line.rsplit("\t", 1)[1] for line in (rte_slice / "RTE" / "dev.tsv").read_text().splitlines()[1:]]
    assert baseline == pytest.approx(max(labels.count("entailment"), labels.count("not_entailment")) / 64)
    assert accuracy >= baseline + 0.2, results["metrics"]
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["metrics"] == results["metrics"] and saved["objective"] == "AutoregressiveLM"
    assert saved["input_mask_share"] == 0.0  # natural text holds no [MASK]: the discrepancy's other side
    assert {"task", "pretrained", "seed", "mode", "examples", "wall_seconds"} <= saved.keys()
    # pretrained on 32-token blocks: the task's 64 is cut to the 32 positions pretraining trained
    assert (saved["requested_max_length"], saved["trained_length"], saved["max_length"]) == (64, 32, 32)
    assert 0 < saved["at_length_cap"]["dev"] <= 1
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert {"rte/train/loss", "rte/val/accuracy"} <= set(events.Tags()["scalars"])


@pytest.fixture(scope="module")
def conll_slice(tmp_path_factory, data_dir) -> Path:
    """A CoNLL folder whose train and validation files are both the first 300 training sentences."""
    root = tmp_path_factory.mktemp("conll")
    blocks = (data_dir / "conll2003" / "eng.train").read_text().split("\n\n")[:301]  # -DOCSTART- + 300
    for name in ("eng.train", "eng.testa"):
        (root / name).write_text("\n\n".join(blocks) + "\n")
    return root


def test_conll_slice_beats_the_all_o_baseline_on_held_out_sentences(tmp_path, tiny_pretrained, data_dir):
    cfg = finetune_config(tmp_path, "task=conll2003", f"pretrained={tiny_pretrained['mlm']}",
                          f"task.data.source={data_dir / 'conll2003'}",
                          "task.data.max_train_examples=400", "task.data.max_eval_examples=300", "task.epochs=6",
                          "task.optim.lr=5e-3")
    results = run_finetune(cfg)
    scores, baseline = results["metrics"]["validation"], results["majority_baseline"]["validation"]
    assert baseline["f1"] == 0.0  # all-O finds no entity
    assert scores["f1"] > 0.05, scores
    assert {"f1_PER", "f1_LOC", "f1_ORG", "f1_MISC", "precision", "recall"} <= scores.keys()
    assert results["attention"] == "bidirectional" and results["mode"] == "full"
    assert results["word_subword"] == "first"  # auto, for a bidirectional reader
    items = json.loads((tmp_path / "items.json").read_text())  # each dev sentence's counts after every epoch
    assert items["metrics"] == {"entities": {"statistics": ["tp", "fp", "fn"], "score": "f1"}}
    per_epoch = items["splits"]["validation"]["entities"]
    assert len(per_epoch) == 6 and all(len(counts) == results["examples"]["validation"] for counts in per_epoch)
    tp, fp, fn = np.asarray(per_epoch[-1]).sum(axis=0)
    assert 2 * tp / (2 * tp + fp + fn) == pytest.approx(scores["f1"], abs=1e-6)
    # each dev sentence's document, in dev order: the first 300 of eng.testa's, as read_conll numbers them
    documents = [s.document for s in read_conll(data_dir / "conll2003" / "eng.testa")][:300]
    assert items["clusters"] == {"validation": documents} and len(set(documents)) > 5


def test_feature_based_ner_fits_a_slice_with_the_backbone_frozen(tmp_path, tiny_pretrained, conll_slice):
    """A frozen, barely pretrained tiny backbone gives weak features: the check is that the head over the
    concatenated layers learns (beats all-O on the sentences it trained on) while the backbone stays put."""
    cfg = finetune_config(tmp_path, "task=conll2003", f"pretrained={tiny_pretrained['mlm']}", "finetune.mode=features",
                          f"task.data.source={conll_slice}", "task.epochs=25", "task.optim.features_lr=1e-2",
                          "finetune.dropout=0")
    results = run_finetune(cfg)
    assert results["optim"]["lr"] == 1e-2 and results["mode"] == "features"
    # 25 epochs: F1 0.32-0.38 in three fresh processes (each trains its own tokenizer, whose ids vary; at 10
    # epochs one full-suite run fell to 0.047)
    assert results["metrics"]["validation"]["f1"] > 0.15 > results["majority_baseline"]["validation"]["f1"]
    before = load_pretrained(tiny_pretrained["mlm"]).weights
    after = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    assert all(torch.equal(after[f"backbone.{k}"], v) for k, v in before.items())


def test_a_finished_or_interrupted_run_resumes_from_its_last_checkpoint(tmp_path, tiny_pretrained, rte_slice):
    """ckpt_path= continues from the epoch-end checkpoint; after the last epoch there is nothing left to
    train, and the scores saved in the checkpoint are reported again (a study rerun after a crash that hit
    between the checkpoint and results.json)."""
    settings = ["task=rte", f"pretrained={tiny_pretrained['ar']}", f"task.data.source={rte_slice}", "task.epochs=2"]
    first = run_finetune(finetune_config(tmp_path / "a", *settings))
    last = tmp_path / "a" / "checkpoints" / "last.ckpt"
    resumed = run_finetune(finetune_config(tmp_path / "a", *settings, f"ckpt_path={last}"))
    assert resumed["steps"] == first["steps"] > 0 and resumed["metrics"] == first["metrics"]
    with pytest.raises(ValueError, match=r"other settings \(optim\.lr: checkpoint 0\.0002 vs run 0\.001, "
                                         r"settings\.mode: checkpoint 'full' vs run 'features'\)"):
        run_finetune(finetune_config(tmp_path / "b", *settings, "finetune.mode=features", f"ckpt_path={last}"))
    with pytest.raises(ValueError, match="not a fine-tuning checkpoint"):
        run_finetune(finetune_config(tmp_path / "c", *settings,
                                     f"ckpt_path={tiny_pretrained['ar'] / 'checkpoints' / 'last.ckpt'}"))


def test_trainer_max_steps_is_honoured_and_the_stopping_step_validated(tmp_path, tiny_pretrained, rte_slice):
    """64 examples in batches of 16: 4 steps an epoch; max_steps=6 stops in the second epoch and validates there. The
    trainer's matmul precision is the run's (a process-wide setting, which a study's in-process stage inherited)."""
    results = run_finetune(finetune_config(tmp_path, "task=rte", f"pretrained={tiny_pretrained['ar']}",
                                           f"task.data.source={rte_slice}", "task.epochs=3", "trainer.max_steps=6",
                                           "trainer.step.matmul_precision=medium"))
    assert torch.get_float32_matmul_precision() == "medium"  # set back after the test (conftest)
    assert results["steps"] == 6 and results["max_steps"] == 6
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    # Lightning logs a validation at the index of the batch it follows: the epoch end (step 4) and step 6.
    assert [e.step for e in events.Scalars("rte/val/accuracy")] == [3, 5]
    assert results["metrics"]["dev"]["accuracy"] is not None
    saved = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    assert saved["global_step"] == 6  # the checkpoint holds the model the scores describe
    norms = logged_scalars(tmp_path, "rte/train/grad_norm")  # beside rte/train/loss, at logging steps
    assert norms and all(0 < n < float("inf") for n in norms)


def test_an_infinite_gradient_stops_fine_tuning_before_any_checkpoint_holds_its_weights(tmp_path, tiny_pretrained,
                                                                                       rte_slice, monkeypatch):
    """4 steps an epoch: the first epoch's checkpoint (step 4) is written, then step 5's gradient is inf. Clipping
    would scale it to zero and the run would go on without learning; it stops instead, naming the step."""
    with_callbacks(monkeypatch, SpoilGradients(at=5), stage="armlm.finetune.run")
    cfg = finetune_config(tmp_path, "task=rte", f"pretrained={tiny_pretrained['ar']}", f"task.data.source={rte_slice}",
                          "task.epochs=2")
    with pytest.raises(NonFiniteGradientError, match=r"gradient norm was inf at step 5 .*last saved checkpoint is "
                                                     r"intact"):
        run_finetune(cfg)
    assert_checkpoints_all_at(tmp_path / "checkpoints", step=4)
    assert not (tmp_path / "results.json").exists()


def test_the_command_line_runs_a_task_into_its_run_folder(tmp_path, tiny_pretrained, rte_slice):
    run_dir = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, "train.py", "task=rte", f"pretrained={tiny_pretrained['mlm']}",
         f"task.data.source={rte_slice}",
         "task.epochs=1", "finetune.attention=causal", "finetune.pooling=mean", f"hydra.run.dir={run_dir}", *QUICK],
        cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    saved = json.loads((run_dir / "results.json").read_text())
    assert (saved["objective"], saved["attention"], saved["pooling"]) == ("MaskedLM", "causal", "mean")
    assert (run_dir / "checkpoints" / "last.ckpt").is_file()
    # Lightning's messages once, by Hydra's route: on the console and in the run's log file (training.trainer's
    # lightning_through_the_root; imported after Hydra configured logging, they were printed twice)
    said = "GPU available: False, used: False"
    assert (result.stdout + result.stderr).count(said) == 1, result.stderr[-2000:]
    assert said in (run_dir / "finetune.log").read_text()


def test_bad_fine_tuning_commands_name_the_fix(tmp_path, tiny_pretrained):
    with pytest.raises(ValueError, match="needs pretrained="):
        run_finetune(finetune_config(tmp_path, "task=rte"))
    with pytest.raises(ValueError, match="max_length=1024 exceeds the checkpoint's model.max_len=512"):
        run_finetune(finetune_config(tmp_path, "task=cola", f"pretrained={tiny_pretrained['ar']}",
                                     "task.data.max_length=1024"))
    with pytest.raises(ValueError, match="finetune.attention='sideways'"):
        run_finetune(finetune_config(tmp_path, "task=cola", f"pretrained={tiny_pretrained['ar']}",
                                     "finetune.attention=sideways"))
    result = subprocess.run([sys.executable, "train.py", "task=sst3"], cwd=REPO, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode != 0 and "Could not find 'task/sst3'; choose one of" in result.stderr
    assert "sst2" in result.stderr


@pytest.mark.parametrize("trained,requested,used", [(64, 128, 64), (64, 48, 48), (None, 128, 128)])
def test_inputs_are_cut_to_the_positions_pretraining_trained(trained, requested, used, caplog):
    source = ArmlmSource(origin="x.ckpt", kind="armlm", backbone=None, reading=None, tokenizer=None, special=None,
                         longest_input=512, trained_length=trained)  # only what the cut reads
    assert trained_max_length(requested, source) == used
    assert ("exceeds the 64 positions" in caplog.text) == (requested > 64 and trained == 64)
    assert ("does not record its pretraining block size" in caplog.text) == (trained is None)


def test_fine_tuning_checkpoints_from_before_attention_was_a_value_compare_under_the_new_keys():
    saved = {"settings": {"mode": "full", "causal": True, "pooling": "last"},
             "pretrained": {"objective": "AutoregressiveLM", "causal": True}, "seed": 1}
    renamed = older_keys(saved)
    assert renamed["settings"] == {"mode": "full", "attention": "causal", "pooling": "last", "features": "concat",
                                   "word_subword": "first"}  # every tagger read first subwords before issue 46
    assert renamed["pretrained"] == {"objective": "AutoregressiveLM", "finetune_attention": "causal"}
    # From before `features` existed: those runs concatenated layers.
    assert older_keys({"settings": {"attention": "bidirectional"}, "pretrained": {}}) == {
        "settings": {"attention": "bidirectional", "features": "concat"}}
    assert older_keys({"settings": {"attention": "causal", "features": "scalar_mix"}, "pretrained": {}}) == {}


@pytest.mark.parametrize(("objective_attention", "attention", "word_subword", "expected"), [
    ("causal", "pretrained", "auto", ("causal", "last")), ("causal", "bidirectional", "auto", ("bidirectional", "first")),
    ("bidirectional", "causal", "auto", ("causal", "last")), ("bidirectional", "pretrained", "auto", ("bidirectional", "first")),
    ("causal", "pretrained", "first", ("causal", "first")), ("bidirectional", "pretrained", "last", ("bidirectional", "last"))])
def test_a_tagger_reads_each_word_where_its_reader_has_seen_all_of_it(objective_attention, attention, word_subword,
                                                                        expected):
    """auto: a causal reader labels a word at its last subword (the first state that has seen the whole word), a
    bidirectional one at its first; an explicit first or last is kept."""
    cfg = composed_config("finetune", ["task=conll2003", f"finetune.attention={attention}",
                                       f"finetune.word_subword={word_subword}"]).finetune
    reading = Reading("Stub", "chain_rule", False, objective_attention)
    settings = resolve_settings(cfg, type("Source", (), {"reading": reading}))
    assert (settings["attention"], settings["word_subword"]) == expected
