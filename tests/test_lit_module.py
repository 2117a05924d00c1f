"""The pretraining LightningModule's own behaviour, without a Trainer."""

import numpy as np
import pytest
import torch

from armlm.common.seeding import VAL_CORRUPTION
from armlm.datamodules.pretrain import PretrainDataModule
from armlm.objectives.ar import AutoregressiveLM
from armlm.objectives.electra import AllTokensMLM, Electra
from armlm.objectives.masked_diffusion import MaskedDiffusionLM
from armlm.objectives.mlm import MaskedLM
from armlm.training.lit_module import PretrainModule
from tests.helpers.models import ELECTRA_SHAPE
from tests.helpers.objectives import blocks, mixture

DATAMODULE_STATE = PretrainDataModule.__qualname__  # the key Lightning keeps the DataModule's state_dict under

SETTINGS = dict(model={"vocab_size": 64, "max_len": 32, "d_model": 32, "n_layers": 1, "n_heads": 2, "d_ff": 64},
                objective={"_target_": "armlm.objectives.ar.AutoregressiveLM"}, optim={}, seed=1)


def test_a_checkpoint_from_before_the_data_position_moved_hands_it_to_the_datamodule():
    module = PretrainModule(**SETTINGS)
    older = {"data_position": {"epoch": 2, "batches": 7}, "tokenizer_json": "{}"}
    module.on_load_checkpoint(older)
    assert older[DATAMODULE_STATE] == {"epoch": 2, "batches": 7}
    newer = {"data_position": {"epoch": 2, "batches": 7}, DATAMODULE_STATE: {"epoch": 3, "batches": 1}}
    module.on_load_checkpoint(newer)
    assert newer[DATAMODULE_STATE] == {"epoch": 3, "batches": 1}  # a newer checkpoint's own state wins
    untouched = {"tokenizer_json": "{}"}
    module.on_load_checkpoint(untouched)
    assert DATAMODULE_STATE not in untouched


def test_a_built_objective_is_used_and_kept_out_of_the_hyperparameters():
    objective = AutoregressiveLM()
    module = PretrainModule(**SETTINGS, built_objective=objective)
    assert module.objective is objective and "built_objective" not in module.hparams


def validated(objective, vocab, batches, monkeypatch):
    """What a validation epoch logs for `objective` over `batches` (no Trainer: self.log captured)."""
    settings = {**SETTINGS, "model": {**SETTINGS["model"], "vocab_size": vocab.size}}
    module = PretrainModule(**settings, built_objective=objective).eval()
    module.target_log_probs = torch.from_numpy(vocab.target_unigram_log_probs()).float()
    logged = {}
    monkeypatch.setattr(module, "log", lambda name, value, **_: logged.__setitem__(name, float(value)))
    with torch.no_grad():
        for index, batch in enumerate(batches):
            module.validation_step({"input_ids": batch}, index)
        module.on_validation_epoch_end()
    return module, logged


def brute_unigram(vocab, targets) -> float:
    """The add-1/2 training unigram over every id but [PAD] and [MASK], read at each target."""
    counts = vocab.unigram_counts.astype(float) + 0.5
    counts[[vocab.pad_id, vocab.mask_id]] = 0.0
    return float(np.mean([-np.log(counts[t] / counts.sum()) for t in targets]))


def test_the_gate_reads_ar_against_the_unigram_nll_of_its_own_next_tokens(vocab, monkeypatch):
    batches = [blocks(vocab, rows=4, length=12) for _ in range(2)]
    _, logged = validated(AutoregressiveLM(), vocab, batches, monkeypatch)
    targets = [int(t) for batch in batches for t in batch[:, 1:].flatten()]  # AR scores every position after [CLS]
    assert logged["val/own_unigram"] == pytest.approx(brute_unigram(vocab, targets), rel=1e-5)
    assert logged["val/own_below_unigram"] == pytest.approx(logged["val/own_unigram"] - logged["val/loss"], abs=1e-5)


def test_a_mixture_is_gated_pooled_and_per_component_on_the_targets_each_scored(vocab, monkeypatch):
    mlm = MaskedLM()
    mlm.set_vocabulary(vocab)
    objective = mixture(vocab, ar=(0.5, AutoregressiveLM()), mlm=(0.5, mlm))
    batch = blocks(vocab, rows=6, length=16)
    module, logged = validated(objective, vocab, [batch], monkeypatch)
    ar_rows = objective.row_counts(6)["ar"]
    ar_unigram = brute_unigram(vocab, [int(t) for t in batch[:ar_rows, 1:].flatten()])
    assert logged["val/own_unigram_ar"] == pytest.approx(ar_unigram, rel=1e-5)
    assert logged["val/own_below_unigram_ar"] == pytest.approx(ar_unigram - logged["val/loss_ar"], abs=1e-5)
    # The MLM rows' targets are the positions its corruption drew: recorded through the LM head, read back here.
    with module.model.recording_targets() as recorded, torch.no_grad():
        objective.loss({"input_ids": batch}, module.model, module.corruption_generator(VAL_CORRUPTION, 0))
    mlm_targets = [int(t) for scope, targets in recorded if scope == "mlm" for t in targets]
    assert 0 < len(mlm_targets) < batch[ar_rows:].numel()
    assert logged["val/own_unigram_mlm"] == pytest.approx(brute_unigram(vocab, mlm_targets), rel=1e-5)
    pooled = [int(t) for _, targets in recorded for t in targets]
    assert logged["val/own_unigram"] == pytest.approx(brute_unigram(vocab, pooled), rel=1e-5)
    assert logged["val/own_below_unigram"] == pytest.approx(logged["val/own_unigram"] - logged["val/loss"], abs=1e-5)


def test_masked_diffusion_is_gated_on_its_bound(vocab, monkeypatch):
    objective = MaskedDiffusionLM()
    objective.set_vocabulary(vocab)
    _, logged = validated(objective, vocab, [blocks(vocab, rows=4, length=12)], monkeypatch)
    assert logged["val/own_below_unigram"] == pytest.approx(logged["val/own_unigram"] - logged["val/nelbo"], abs=1e-5)


def electra_family(cls, vocab):
    shape = {**ELECTRA_SHAPE, **{k: SETTINGS["model"][k] for k in ("d_model", "n_layers", "max_len")}}
    torch.manual_seed(0)
    objective = cls(**shape)
    objective.set_vocabulary(vocab)
    return objective


def test_electra_is_gated_on_its_detection_loss_against_the_binary_entropy_of_its_labels(vocab, monkeypatch):
    _, logged = validated(electra_family(Electra, vocab), vocab, [blocks(vocab, rows=4, length=16)], monkeypatch)
    share = logged["val/replaced_share"]
    assert 0 < share < 1
    entropy = -(share * np.log(share) + (1 - share) * np.log(1 - share))  # what ignoring the input scores at best
    assert logged["val/own_unigram"] == pytest.approx(entropy, rel=1e-5)
    # The detector's loss alone: not the generator's, not the lambda-weighted total.
    assert logged["val/own_below_unigram"] == pytest.approx(entropy - logged["val/rtd_loss"], abs=1e-5)
    assert logged["val/loss"] != pytest.approx(logged["val/rtd_loss"], abs=1e-3)


def test_all_tokens_mlm_is_gated_on_its_selected_positions_against_their_unigram(vocab, monkeypatch):
    objective = electra_family(AllTokensMLM, vocab)
    batch = blocks(vocab, rows=4, length=16)
    module, logged = validated(objective, vocab, [batch], monkeypatch)
    corrupted = objective.replace({"input_ids": batch}, module.model, module.corruption_generator(VAL_CORRUPTION, 0))
    selected = [int(t) for t in batch[corrupted.selected]]
    assert 0 < len(selected) < batch.numel()
    assert logged["val/own_unigram"] == pytest.approx(brute_unigram(vocab, selected), rel=1e-5)
    assert logged["val/own_below_unigram"] == pytest.approx(logged["val/own_unigram"] - logged["val/selected_loss"],
                                                            abs=1e-5)
