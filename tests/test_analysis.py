"""The analysis helpers and the notebook run on real (tiny) run folders."""

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from armlm.analysis.tables.runs import curve_by_tokens, find_runs, summary_table
from armlm.training.run import run_pretraining
from tests.helpers.configs import tiny_config

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory, cache_dir):
    root = tmp_path_factory.mktemp("runs")
    for objective in ("ar", "mlm"):
        run_pretraining(tiny_config(root / objective, cache_dir, f"objective={objective}"))
    return root


def test_summary_table_and_curves_share_the_token_axis(two_runs):
    runs = find_runs(two_runs)
    assert [r.name for r in runs] == ["ar", "mlm"]
    table = summary_table(runs)
    assert list(table["objective"]) == ["AutoregressiveLM", "MaskedLM"]
    assert (table["below_baseline"] == table["unigram_baseline"] - table["val_loss"]).all()
    ar, mlm = (curve_by_tokens(r) for r in runs)
    assert list(ar.index) == list(mlm.index) == [4 * 8 * 32, 8 * 8 * 32]  # validations at steps 4 and 8


def test_notebook_executes_and_saves_the_plot(two_runs, monkeypatch):
    monkeypatch.setenv("ARMLM_RUNS", str(two_runs))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    notebook = nbformat.read(REPO / "notebooks" / "compare_runs.ipynb", as_version=4)
    NotebookClient(notebook, timeout=120, resources={"metadata": {"path": str(REPO / "notebooks")}}).execute()
    assert (two_runs / "learning_curves.png").stat().st_size > 10_000
