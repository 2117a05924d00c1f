"""`armlm report finetune <folder>` (analysis.reports.finetune_results): a row per run, split and metric from each
results.json, and the median and spread over seeds; a results.json that is not JSON is one line naming the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from armlm.analysis.reports.finetune_results import find_results, results_table, seed_summary
from armlm.common.atomic import atomic_write_artefact
from armlm.common.errors import ArmlmError


def write_result(folder: Path, seed: int, accuracy: float) -> None:
    folder.mkdir(parents=True)
    atomic_write_artefact(folder / "results.json", {
        "task": "rte", "pretrained": {"checkpoint": "runs/mlm/checkpoints/last.ckpt"}, "objective": "mlm",
        "mode": "full", "attention": "bidirectional", "pooling": "first", "seed": seed, "wall_seconds": 1.0,
        "metrics": {"dev": {"accuracy": accuracy}}, "majority_baseline": {"dev": {"accuracy": 0.527}}})


def test_seeds_of_one_experiment_are_summarised_with_their_spread(tmp_path):
    for seed, accuracy in ((1, 0.60), (2, 0.64), (3, 0.56)):
        write_result(tmp_path / f"seed{seed}", seed, accuracy)
    (row,) = seed_summary(results_table(find_results(tmp_path))).to_dict("records")
    assert (row["seeds"], row["median"], row["min"], row["max"], row["baseline"]) == (3, 0.60, 0.56, 0.64, 0.527)
    assert row["std"] == pytest.approx(0.04)


def test_a_results_file_that_is_not_json_is_one_line_naming_the_fix(tmp_path):
    write_result(tmp_path / "seed1", 1, 0.6)
    path = tmp_path / "seed1" / "results.json"
    path.write_text(path.read_text()[:100])  # cut, as a full disk or a kill leaves a file written in place
    with pytest.raises(ArmlmError, match=rf"^{path} is not valid JSON \(.*\); delete it and rerun the stage that"):
        results_table(find_results(tmp_path))
