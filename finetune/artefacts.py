"""What a fine-tuning run writes, by name, importable without torch: the study orchestrator and the reports read
these files and tags, and should not load the training stack to know their names."""

from __future__ import annotations

ITEMS_FILE = "items.json"  # beside a fine-tuning run's results.json


def metric_tag(task: str, split: str, metric: str) -> str:
    """`<task>/val/<metric>` for a dev split (MNLI's two: `<metric>_matched`, `<metric>_mismatched`);
    `<task>/test/<metric>` when a test split with labels (CoNLL's testb) is evaluated too."""
    if split == "test":
        return f"{task}/test/{metric}"
    suffix = "_" + split.removeprefix("dev_") if split.startswith("dev_") else ""
    return f"{task}/val/{metric}{suffix}"
