"""The study-level BLiMP table: means and t intervals over seeds,
the release's models beside, the per-paradigm table with each side's correlation with the release's 5-gram, several
studies in one table, nothing written where no arm was scored zero-shot."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from armlm.analysis.reports.blimp_report import blimp_runs, labelled_reports, write_blimp_report
from armlm.common.migrations import versioned


def group(level: str, name: str, accuracy: float, paradigms: int) -> dict:
    return {"level": level, "name": name, "accuracy": accuracy, "ci_low": 0.0, "ci_high": 1.0,
            "pairs": 50 * paradigms, "paradigms": paradigms}


def write_zeroshot(root: Path, arm: str, seed: int, results: dict[str, list[dict]], published: list | None = None):
    folder = root / arm / f"seed{seed}" / "zeroshot"
    folder.mkdir(parents=True)
    blimp = {"results": results, "published": published or []}
    (folder / "zeroshot.json").write_text(json.dumps(versioned({"checkpoint": "x", "blimp": blimp, "settings": {}})))


def mlm_results(overall: float, ties: int | None = None) -> list[dict]:
    return [group("overall", "overall", overall, 3) | ({} if ties is None else {"ties": ties}),
            group("field", "morphology", 0.9, 1),
            group("field", "syntax_semantics", 0.3, 2), group("phenomenon", "npi", 0.4, 3),
            group("paradigm", "npi_1", 0.4, 1)]


@pytest.fixture
def study(tmp_path: Path) -> Path:
    published = [{"level": "overall", "name": "overall", "GPT-2": 0.8},
                 {"level": "field", "name": "morphology", "GPT-2": 0.6},
                 {"level": "field", "name": "syntax_semantics", "GPT-2": 0.9}]
    for seed, overall in ((1, 0.44), (2, 0.46), (3, 0.51)):
        write_zeroshot(tmp_path, "mlm", seed, {"pll": mlm_results(overall, ties=seed - 1), "pll_word_l2r": mlm_results(0.5)},
                       published)
    write_zeroshot(tmp_path, "ar", 1, {"exact": [group("overall", "overall", 0.52, 3)]})
    return tmp_path


def test_each_field_is_one_row_per_method_and_paradigms_are_left_to_their_own_table(study):
    runs = blimp_runs(labelled_reports([study]))
    fields = runs[(runs["arm"] == "mlm") & (runs["level"] == "field") & (runs["seed"] == 1)]
    assert fields["name"].tolist() == ["morphology", "syntax_semantics"] * 2  # per method
    assert fields["accuracy"].tolist() == pytest.approx([0.9, 0.3] * 2)
    assert "paradigm" not in set(runs["level"])  # paradigms have their own table


def test_the_table_gives_the_mean_and_t_interval_over_seeds_and_the_release_beside(study):
    written = write_blimp_report(study)
    assert [p.name for p in written] == ["blimp.csv", "blimp.md", "blimp.png", "blimp_paradigms.md"]
    assert (study / "report" / "blimp.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = (study / "report" / "blimp.md").read_text()
    values = [0.44, 0.46, 0.51]
    half = stats.t.ppf(0.975, 2) * stats.tstd(values) / 3 ** 0.5
    # ties summed over seeds (0 + 1 + 2); '-' where the reports count none
    assert f"| mlm | pll | 3 | 3 | {sum(values) / 3:.3f} ± {half:.3f} | 0.900 ± 0.000 | 0.300 ± 0.000 |" in text
    assert "| mlm | pll_word_l2r | 3 | - | 0.500 ± 0.000 |" in text
    assert "| ar | exact | 1 | - | 0.520 | - |" in text  # one seed: no interval; a field it lacks: '-'
    assert "| GPT-2 (release) | published | - | - | 0.800 | 0.600 | 0.900 |" in text


def test_the_paradigm_table_sets_each_side_beside_the_release_with_its_correlation_with_the_5_gram(tmp_path):
    ar = {1: [0.2, 0.6, 0.9, 0.5], 2: [0.4, 0.6, 0.7, 0.7]}  # paradigms p1-p4 by seed; the release lacks p4
    five_gram, gpt2 = [0.3, 0.5, 0.8], [0.9, 0.95, 0.7]
    published = [{"level": "paradigm", "name": f"p{k + 1}", "5-gram": five_gram[k], "GPT-2": gpt2[k]} for k in range(3)]
    for seed, accuracies in ar.items():
        results = [group("overall", "overall", sum(accuracies) / 4, 4),
                   *(group("paradigm", f"p{k + 1}", a, 1) for k, a in enumerate(accuracies))]
        write_zeroshot(tmp_path, "ar", seed, {"exact": results}, published)
    write_blimp_report(tmp_path)
    lines = (tmp_path / "report" / "blimp_paradigms.md").read_text().splitlines()
    assert "| paradigm | ar · exact (n=2) | 5-gram (release) | GPT-2 (release) |" in lines
    assert "| p1 | 0.300 | 0.300 | 0.900 |" in lines  # the mean over seeds beside the release
    assert "| p4 | 0.600 | - | - |" in lines
    mean = np.mean([ar[1][:3], ar[2][:3]], axis=0)  # the correlation reads the paradigms both scored
    r_ar, r_gpt2 = np.corrcoef(mean, five_gram)[0, 1], np.corrcoef(gpt2, five_gram)[0, 1]
    assert lines[-1] == f"| Pearson r with the 5-gram | {r_ar:.2f} | 1.00 | {r_gpt2:.2f} |"


def test_several_studies_name_their_arms_by_folder(study, tmp_path_factory):
    other = tmp_path_factory.mktemp("curricula")
    write_zeroshot(other, "mlm", 1, {"pll": mlm_results(0.6)})
    arms = set(blimp_runs(labelled_reports([study, other]))["arm"])
    assert arms == {f"{study.name}/mlm", f"{study.name}/ar", f"{other.name}/mlm"}


def test_a_study_without_zero_shot_runs_writes_no_table(tmp_path):
    assert write_blimp_report(tmp_path) == []
    assert not (tmp_path / "report").exists()
