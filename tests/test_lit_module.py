"""The pretraining LightningModule's own behaviour, without a Trainer."""

from datamodules.pretrain import PretrainDataModule
from objectives.ar import AutoregressiveLM
from training.lit_module import PretrainModule

DATAMODULE_STATE = PretrainDataModule.__qualname__  # the key Lightning keeps the DataModule's state_dict under

SETTINGS = dict(model={"vocab_size": 64, "max_len": 32, "d_model": 32, "n_layers": 1, "n_heads": 2, "d_ff": 64},
                objective={"_target_": "objectives.ar.AutoregressiveLM"}, optim={}, seed=1)


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
