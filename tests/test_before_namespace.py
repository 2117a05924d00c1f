"""Checkpoints and exports written before the `armlm` namespace (issue 85) load and give the numbers they gave.

tests/fixtures/before_namespace/ was written by armlm at 044a16f, the last commit with bare top-level packages
(tools: a worktree of that commit ran train.py, evaluate.py, train.py task=rte and export.py; the checkpoints were
saved again without their optimiser state). Its hyperparameters name `objectives.mlm.MaskedLM`,
`models.backbone.ModelConfig` and `finetune.metrics.accuracy`; common.migrations.migrate_code_references names them
as today when models.checkpoint reads them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from armlm.common.config import compose_config
from armlm.common.migrations import migrate_code_references, namespaced
from armlm.diagnostics.run import run_diagnostics
from armlm.models.checkpoint import read_checkpoint

FIXTURES = Path(__file__).parent / "fixtures" / "before_namespace"
EVALUATE = ["pairs=2", "candidates=4", "representations.sentences=4", "likelihood.blocks=2", "likelihood.draws=2",
            "likelihood.max_draws=2"]  # the settings the fixture's diagnostics.json was written with


def test_bare_code_references_are_namespaced_and_nothing_else_is():
    assert namespaced("objectives.mlm.MaskedLM") == "armlm.objectives.mlm.MaskedLM"
    assert namespaced("training.run:pretrain") == "armlm.training.run:pretrain"
    assert namespaced("armlm.objectives.mlm.MaskedLM") == "armlm.objectives.mlm.MaskedLM"
    for text in ("training.log", "diagnostics.json", "finetune.dropout", "models", "objectives.nothing.Here"):
        assert namespaced(text) == text  # not code today: a file, a setting, a bare word, a module that never was
    nested = {"objective": {"_target_": "objectives.ar.AutoregressiveLM", "parts": [{"_target_": "objectives.mlm.MaskedLM"}]},
              "note": "training.log", "steps": 3}
    assert migrate_code_references(nested) == {
        "objective": {"_target_": "armlm.objectives.ar.AutoregressiveLM",
                      "parts": [{"_target_": "armlm.objectives.mlm.MaskedLM"}]}, "note": "training.log", "steps": 3}


def test_the_fixture_names_its_code_as_it_was_written():
    raw = torch.load(FIXTURES / "mlm.ckpt", map_location="cpu", weights_only=True)["hyper_parameters"]
    assert raw["objective"]["_target_"] == "objectives.mlm.MaskedLM"  # so the tests below read the old form
    assert read_checkpoint(FIXTURES / "mlm.ckpt")["hyper_parameters"]["objective"]["_target_"] == \
        "armlm.objectives.mlm.MaskedLM"
    raw_task = torch.load(FIXTURES / "rte.ckpt", map_location="cpu", weights_only=True)["hyper_parameters"]["task"]
    task = read_checkpoint(FIXTURES / "rte.ckpt")["hyper_parameters"]["task"]
    assert [spec["_target_"] for spec in raw_task["metrics"].values()] == ["finetune.metrics.accuracy"]
    assert [spec["_target_"] for spec in task["metrics"].values()] == ["armlm.finetune.metrics.accuracy"]


@pytest.mark.slow
def test_a_pretraining_checkpoint_from_before_evaluates_to_the_numbers_it_gave(tmp_path):
    cfg = compose_config("evaluate", [f"checkpoint={FIXTURES / 'mlm.ckpt'}", *EVALUATE, f"output_dir={tmp_path}"])
    run_diagnostics(cfg)
    now = json.loads((tmp_path / "diagnostics.json").read_text())
    then = json.loads((FIXTURES / "diagnostics.json").read_text())
    for section in ("likelihood", "sequence", "pairwise", "representations"):
        measured = numbers(then[section])
        assert len(measured) > 5, section  # the comparison reads real sections
        assert numbers(now[section]) == pytest.approx(measured, abs=1e-6), section


def numbers(node: object, at: str = "") -> dict[str, float]:
    """Every number in a report section by its path, timings left out (they differ from run to run)."""
    if isinstance(node, dict):
        return {k: v for key, value in node.items() if "seconds" not in key
                for k, v in numbers(value, f"{at}/{key}").items()}
    if isinstance(node, list):
        return {k: v for i, value in enumerate(node) for k, v in numbers(value, f"{at}/{i}").items()}
    return {at: float(node)} if isinstance(node, int | float) and not isinstance(node, bool) else {}


def test_a_fine_tuned_checkpoint_from_before_exports_the_same_weights_as_then(tmp_path):
    """The fine-tuned RTE classifier, read by today's code and exported again, is its export of then, tensor for
    tensor; today's export checks itself against armlm's own outputs (the parity check), so it computes what the
    checkpoint does. Of then's export folder only its weights are kept."""
    from armlm.interchange.export import run_export

    cfg = compose_config("export", [f"checkpoint={FIXTURES / 'rte.ckpt'}", f"out={tmp_path / 'rte'}"])
    run_export(cfg)
    then = load_file(FIXTURES / "rte-export" / "model.safetensors")
    now = load_file(tmp_path / "rte" / "model.safetensors")
    assert then.keys() == now.keys() and then
    for name in then:
        assert torch.equal(then[name], now[name]), name
