"""The TensorBoard scalar tags a run folder holds, and those every pretraining run logs."""

from __future__ import annotations

from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def scalar_tags(run_dir: Path) -> set[str]:
    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    return set(events.Tags()["scalars"])


COMMON_TAGS = {"train/loss", "val/loss", "val/ppl", "train/tokens_seen", "train/pred_tokens_seen", "train/lr",
               "train/tokens_per_s", "train/flops_seen", "val/unigram_baseline"}
