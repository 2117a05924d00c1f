"""A diagnostics report computed once per checkpoint and settings: a notebook re-run reads the report that is there
instead of redoing minutes of forward passes (analysis.tables.diagnostics_tables then reads the reports into tables)."""

from __future__ import annotations

import json
from pathlib import Path

from omegaconf import OmegaConf

from armlm.diagnostics.run import evaluate_config, run_diagnostics


def run_or_reuse(checkpoint: str | Path, out: str | Path, overrides: list[str]) -> Path:
    """`out`/diagnostics.json for `checkpoint`: computed, unless a report with exactly these settings is
    already there."""
    cfg = evaluate_config([f"checkpoint={checkpoint}", f"output_dir={out}", *overrides])
    report = Path(out) / "diagnostics.json"
    if report.exists() and json.loads(report.read_text()).get("settings") == OmegaConf.to_container(cfg, resolve=True):
        return report
    run_diagnostics(cfg)
    return report
