"""What a pretraining run prints for its user: its plan (budget, steps, FLOPs per step, run folder), a progress bar
without `Epoch 0/-2` on a terminal and progress lines elsewhere, no Lightning tips, no `Total FLOPs: 0` summary, and a
`done:` line naming the run folder."""

import logging
import math
import warnings
from types import SimpleNamespace

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from armlm.training.budget import FLOPS_STEP_MARGIN
from armlm.training.lit_module import PretrainModule
from armlm.training.run import run_pretraining
from armlm.training.trainer import DropTips, ProgressLines, RunProgressBar, progress_display, quiet_lightning
from tests.helpers.configs import tiny_config


@pytest.mark.parametrize("max_epochs,description", [(-1, "Epoch 0"), (None, "Epoch 0"), (3, "Epoch 0/2")])
def test_the_progress_bar_names_the_epoch_without_a_negative_total(max_epochs, description):
    bar = RunProgressBar()
    bar._trainer = SimpleNamespace(max_epochs=max_epochs)
    assert bar._get_train_description(0) == description


class Regression(L.LightningModule):
    """A linear model that logs its loss to the progress bar, as armlm's modules log train/loss."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = self.layer(batch[0]).pow(2).mean()
        self.log("train/loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(torch.randn(16, 2)), batch_size=4)  # 4 steps an epoch


def progress_lines(caplog: pytest.LogCaptureFixture, every_s: float, max_steps: int,
                   module: L.LightningModule | None = None) -> list[str]:
    with caplog.at_level(logging.INFO, logger="armlm.progress"):
        L.Trainer(callbacks=[ProgressLines(every_s)], max_steps=max_steps, logger=False, enable_checkpointing=False,
                  enable_model_summary=False, log_every_n_steps=1).fit(module or Regression())
    return [r.getMessage() for r in caplog.records if r.name == "armlm.progress"]


def test_progress_lines_give_the_step_its_share_the_time_left_and_the_bars_metrics(caplog):
    lines = progress_lines(caplog, every_s=0, max_steps=6)  # a line at every step
    assert [line.split(",")[0] for line in lines] == [f"step {s} of 6 ({100 * s / 6:.0f} %)" for s in range(1, 7)]
    assert all("left" in line and "; train/loss " in line for line in lines)
    assert ", about 0 m 00 s left; " in lines[-1]


def test_a_flops_budget_counts_its_schedule_not_the_step_cap(caplog):
    """A module that plans its own steps (PretrainModule.planned_steps: training.run sets schedule_steps where a FLOPs
    budget ends the run before the trainer's step cap) is asked for them."""
    class Scheduled(Regression):
        schedule_steps = 3
        planned_steps = PretrainModule.planned_steps

    assert progress_lines(caplog, every_s=0, max_steps=6, module=Scheduled())[0].startswith("step 1 of 3 (33 %)")


def test_progress_lines_wait_for_their_interval(caplog):
    assert progress_lines(caplog, every_s=3600, max_steps=6) == []


def test_a_terminal_gets_the_bar_and_a_log_file_the_lines(monkeypatch):
    monkeypatch.setattr("sys.stdout.isatty", lambda: True)
    assert isinstance(progress_display(), RunProgressBar)
    monkeypatch.setattr("sys.stdout.isatty", lambda: False)
    lines = progress_display()
    assert isinstance(lines, ProgressLines) and lines.is_enabled  # LightningModule.print asks
    lines.disable()  # what Lightning does on ranks other than 0
    assert lines.is_disabled


def test_lightning_tips_are_dropped_and_its_other_messages_kept():
    tip = logging.LogRecord("lightning", logging.INFO, "", 0, "💡 Tip: For seamless cloud logging ...", None, None)
    other = logging.LogRecord("lightning", logging.INFO, "", 0, "GPU available: False, used: False", None, None)
    assert not DropTips().filter(tip) and DropTips().filter(other)


def everything_shown(caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]) -> str:
    """What a user would see: the printed output, and every logged message (under pytest, Lightning's logger
    propagates to the root, where caplog holds it, instead of printing through its own handler)."""
    printed = capfd.readouterr()
    return "\n".join([printed.out, printed.err, *(record.getMessage() for record in caplog.records)])


@pytest.mark.slow
def test_a_run_prints_its_plan_and_where_it_wrote(tmp_path, cache_dir, caplog, capfd):
    with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.INFO):
        warnings.simplefilter("always")  # pytest's own filters ignore LeafSpec (pyproject.toml); this test must not
        quiet_lightning()
        run_pretraining(tiny_config(tmp_path, cache_dir, "objective=mlm", "max_tokens=2048", "trainer.max_steps=-1"))
    lines = [r.getMessage() for r in caplog.records if r.name == "armlm.train"]
    plan = next(line for line in lines if line.startswith("model:"))
    assert "budget 2,048 input tokens: 8 steps of 8 x 32 tokens" in plan and "training FLOPs each" in plan
    assert plan.endswith(f"run folder {tmp_path}")
    assert next(line for line in lines if line.startswith("done:")).endswith(f"run folder {tmp_path}")
    assert "Total FLOPs" not in everything_shown(caplog, capfd)
    assert [str(w.message) for w in caught if "LeafSpec" in str(w.message)] == []
    # The control: the same capture sees Lightning's model summary and its "Total FLOPs" once it is turned back
    # on, and the LeafSpec warning without quiet_lightning (so neither check above passes by seeing nothing).
    caplog.clear()
    with warnings.catch_warnings(record=True) as loud, caplog.at_level(logging.INFO):
        warnings.simplefilter("always")
        run_pretraining(tiny_config(tmp_path / "summary", cache_dir, "objective=mlm", "trainer.max_steps=1",
                              "trainer.enable_model_summary=true"))
    assert "Total FLOPs" in everything_shown(caplog, capfd)
    assert any("LeafSpec" in str(w.message) for w in loud)


@pytest.mark.slow
def test_a_flops_budget_plans_its_estimated_steps_and_names_the_step_cap_as_one(tmp_path, cache_dir, caplog):
    with caplog.at_level(logging.INFO):
        quiet_lightning()
        run_pretraining(tiny_config(tmp_path, cache_dir, "objective=mlm", "max_tokens=null", "max_flops=2e9",
                                    "trainer.max_steps=-1"))
    lines = [r.getMessage() for r in caplog.records if r.name == "armlm.train"]
    estimated = int(next(line for line in lines if line.startswith("FLOPs budget")).rsplit("about ", 1)[1].split()[0])
    plan = next(line for line in lines if line.startswith("model:"))
    cap = math.ceil(estimated * FLOPS_STEP_MARGIN) + 1
    assert f"budget 2e+09 training FLOPs: about {estimated} (a cap of {cap}) steps of 8 x 32 tokens" in plan
