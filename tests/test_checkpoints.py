"""A run's checkpoints (training.trainer.checkpoints): last.ckpt holds the model at every validation, the last one
included, whatever the monitored metric did, and best-step<N>.ckpt the lowest. Lightning 2.6's `save_last` wrote
last.ckpt only where a top-k file was written too, so a run whose final validation was not its best left the best step
in last.ckpt, the file every later stage reads as the end of the budget."""

from __future__ import annotations

import warnings
from pathlib import Path

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from armlm.training.trainer import LastCheckpoint, RunCheckpoint, checkpoints


class ScriptedValidation(L.LightningModule):
    """A linear model whose validations log the scripted `val/loss` values in turn."""

    def __init__(self, losses: list[float]) -> None:
        super().__init__()
        self.layer, self.losses, self.validations = torch.nn.Linear(2, 1), losses, 0

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self.layer(batch[0]).pow(2).mean()

    def validation_step(self, batch: list[torch.Tensor], batch_idx: int) -> None:
        pass

    def on_validation_epoch_end(self) -> None:
        self.log("val/loss", self.losses[self.validations])
        self.validations += 1

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(torch.randn(16, 2)), batch_size=4)  # 4 steps an epoch

    def val_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=4)


def saved_step(path: Path) -> int:
    return torch.load(path, weights_only=True)["global_step"]


class StepsSaved(L.Callback):
    """The step last.ckpt holds when the next training batch starts: after every checkpoint callback of the step
    before has written, at an epoch's end (fine-tuning's validations) or inside one (pretraining's)."""

    def __init__(self, last: Path) -> None:
        self.last, self.seen = last, []

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: object,
                             batch_idx: int) -> None:
        if self.last.is_file() and (not self.seen or self.seen[-1] != saved_step(self.last)):
            self.seen.append(saved_step(self.last))


def fit(out: Path, losses: list[float], best_by: str | None, ckpt_path: Path | None = None,
        **trainer: object) -> tuple[list[int], StepsSaved]:
    spy = StepsSaved(out / "checkpoints" / "last.ckpt")
    run = L.Trainer(callbacks=[*checkpoints(out, best_by), spy], logger=False, enable_progress_bar=False,
                    enable_model_summary=False, num_sanity_val_steps=0, **trainer)
    run.fit(ScriptedValidation(losses), ckpt_path=ckpt_path)
    return sorted(p.name for p in (out / "checkpoints").iterdir()), spy


@pytest.mark.parametrize("losses,best", [([3.0, 2.0, 4.0, 5.0], 8), ([3.0, 2.0, 1.0, 0.5], 16)],
                         ids=["worse at the end", "best at the end"])
def test_last_ckpt_holds_the_last_step_and_best_the_lowest(tmp_path, losses, best):
    """A validation at every epoch's end, steps 4, 8, 12 and 16: last.ckpt follows each one; the best file stays at
    the lowest val/loss."""
    files, spy = fit(tmp_path, losses, "val/loss", max_epochs=4)
    assert files == [f"best-step{best}.ckpt", "last.ckpt"]
    assert spy.seen == [4, 8, 12]
    assert saved_step(tmp_path / "checkpoints" / "last.ckpt") == 16
    assert saved_step(tmp_path / "checkpoints" / f"best-step{best}.ckpt") == best


def test_validations_inside_an_epoch_write_last_ckpt_each_time(tmp_path):
    """Pretraining's schedule: a validation every 2 steps inside 4-step epochs (check_val_every_n_epoch null), where
    Lightning saves at the validation's end rather than the epoch's; val/loss worst at the end."""
    files, spy = fit(tmp_path, [3.0, 2.0, 1.0, 4.0, 5.0], "val/loss", max_steps=10, val_check_interval=2,
                     check_val_every_n_epoch=None)
    assert files == ["best-step6.ckpt", "last.ckpt"]
    assert spy.seen == [2, 4, 6, 8]
    assert saved_step(tmp_path / "checkpoints" / "last.ckpt") == 10


def test_without_a_metric_last_ckpt_is_written_at_every_epoch_end(tmp_path):
    """Fine-tuning's: an interrupted run resumes from its last epoch, not from nothing."""
    files, spy = fit(tmp_path, [1.0, 1.0, 1.0], None, max_epochs=3)
    assert files == ["last.ckpt"] and spy.seen == [4, 8]
    assert saved_step(tmp_path / "checkpoints" / "last.ckpt") == 12


def test_the_summary_path_is_the_file_in_the_run_folder(tmp_path):
    """Not the callback's restored state: a run resumed from a checkpoint an older callback wrote restores none, and
    one resumed in a moved folder restores the old folder's."""
    last = LastCheckpoint(tmp_path / "checkpoints")
    last.best_model_path = "/elsewhere/checkpoints/last.ckpt"
    assert last.path == ""
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.ckpt").write_bytes(b"")
    assert last.path == str(tmp_path / "checkpoints" / "last.ckpt")


@pytest.mark.parametrize("best_by", [None, "val/loss"], ids=["fine-tuning's", "pretraining's"])
def test_a_resume_into_its_own_folder_is_not_warned_about_and_a_fresh_fit_into_a_used_one_is(tmp_path, best_by):
    """Lightning warns when a fit's checkpoint folder holds files: a resume writes into its own run folder by design,
    while a fresh fit there may overwrite another run's."""
    fit(tmp_path, [3.0, 2.0], best_by, max_epochs=2)
    last = tmp_path / "checkpoints" / "last.ckpt"
    for resumes, warned in ((True, False), (False, True)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fit(tmp_path, [3.0, 2.0, 1.0], best_by, ckpt_path=last if resumes else None, max_epochs=3)
        messages = [str(w.message) for w in caught]
        assert any(RunCheckpoint.NOT_EMPTY in m for m in messages) == warned, (resumes, messages)
        assert saved_step(last) == 12


def test_a_resume_from_the_run_folder_itself_is_quiet(tmp_path):
    """SLURM's requeue resumes from hpc_ckpt_<n>.ckpt in the run folder (default_root_dir), beside checkpoints/."""
    fit(tmp_path, [3.0, 2.0], "val/loss", max_epochs=2)
    requeued = tmp_path / "hpc_ckpt_1.ckpt"
    requeued.write_bytes((tmp_path / "checkpoints" / "last.ckpt").read_bytes())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit(tmp_path, [3.0, 2.0, 1.0], "val/loss", ckpt_path=requeued, default_root_dir=tmp_path, max_epochs=3)
    assert not any(RunCheckpoint.NOT_EMPTY in str(w.message) for w in caught)
    assert saved_step(tmp_path / "checkpoints" / "last.ckpt") == 12
