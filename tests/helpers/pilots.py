"""Builders of fake pilot runs for the pilot-ladder tests: a run's TensorBoard log as train.py writes it (the loss at
every tenth step, the own-loss margin and its baseline at each validation), finished or stopped before its end."""

from pathlib import Path

from torch.utils.tensorboard import SummaryWriter

import bench.pilot_ladder as pilot_ladder

ARMS = ["mlm", "replace_mlm", "electra_15", "all_tokens_mlm", "electra"]
BARS = {"electra": 0.10, "all_tokens_mlm": 0.10}


def write_run(folder: Path, margins: dict[int, float], baseline: float, finished: bool, arm: str = "electra") -> None:
    run = folder / arm / "seed20" / "pretrain"
    writer = SummaryWriter(str(run / "tensorboard"))  # where train.py logs
    for step in range(0, max(margins) + 1, 10):
        writer.add_scalar("train/loss", 1.0, step)
    for step, margin in margins.items():
        writer.add_scalar("val/own_below_unigram", margin, step)
        writer.add_scalar("val/own_unigram", baseline, step)
    writer.close()
    if finished:
        (run / "summary.json").write_text('{"precision": "bf16-mixed"}')


def ladder(root: Path, ends: dict[tuple[str, float], float | None]) -> list[pilot_ladder.Pilot]:
    """Pilot folders whose runs end at the given share (baseline 1.0); None: the run stopped before its end."""
    for (arm, multiple), share in ends.items():
        folder = root / f"x{multiple:g}-{arm}"
        write_run(folder, {100: 0.0, 200: share if share is not None else 0.5}, 1.0, share is not None, arm)
        (root / f"{folder.name}.log").write_text("the run's output, beside its folder")
    pilots = pilot_ladder.pilots_under(root)
    for pilot in pilots:
        pilot_ladder.read(pilot)
    return pilots
