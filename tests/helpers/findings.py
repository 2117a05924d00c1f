"""Builders of a fake study folder for the findings tests: fine-tuning results, diagnostics, likelihood and gate
sections, pretraining summaries, and findings in the short form a study config registers."""

import json
from pathlib import Path

import pandas as pd

from armlm.analysis.findings.measures import parse_side, values
from armlm.analysis.reports.findings_report import findings_table
from armlm.analysis.tables.study_runs import StudyRuns
from armlm.common.migrations import versioned

F1 = {"arm": "mlm", "finetune": "conll2003-full", "metric": "f1"}


def registered(finding: dict, kind: str = "superiority", effect: float = 0.01, margin: float = 0.0) -> dict:
    """A finding written in the short form (a, b, direction) as the study config registers it."""
    test = {"kind": kind, "direction": finding.get("direction", "greater"), "smallest_effect": effect}
    if margin:
        test["margin"] = margin
    return {"claim": "a claim", "anchor": "a paper", "justification": "from the paper",
            **{k: v for k, v in finding.items() if k != "direction"}, "test": test,
            "registered": {"date": "2026-11-24", "commit": "abc1234"}}


def side_values(runs: StudyRuns, side: dict) -> dict[int, float]:
    """seed -> a side's value, the side written as a study config writes it."""
    return values(runs, parse_side(side, "side"))


def judged(root: Path, findings: dict, adjust: bool = False, **study) -> pd.DataFrame:
    """Each finding judged alone (adjust=False) unless a test is about the family."""
    return findings_table(root, {"findings": {k: registered(f) for k, f in findings.items()}, **study}, adjust=adjust)


def write(path: Path, content: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(versioned(content)))  # in today's schema, as writers write it


def finetune_result(root: Path, arm: str, seed: int, folder: str, f1: float, finetune_seed: int | None = None) -> None:
    write(root / arm / f"seed{seed}" / "finetune" / folder / "results.json", {
        "task": "conll2003", "seed": finetune_seed or seed, "mode": "features" if "features" in folder else "full",
        "attention": "bidirectional", "metrics": {"validation": {"f1": f1}},
        "majority_baseline": {"validation": {"f1": 0.0}}, "input_mask_share": 0.0, "primary_metric": "f1"})


def diagnostics(root: Path, arm: str, seed: int, mrf_u: float, unary_u: float, gaps: list[tuple[int, float]],
                candidates: int | None = None) -> None:
    rows = {"mrf": {"u_ppl": mrf_u, "p_ppl": 10.0}, "mlm_unary": {"u_ppl": unary_u}}
    write(root / arm / f"seed{seed}" / "diagnostics" / "diagnostics.json", {
        "candidates": candidates,
        "pairwise": {"random": {"headline_joint": "ag", "rows": rows,
                                "per_pair": {"distance": [d for d, _ in gaps], "gap": {"ag": [g for _, g in gaps]}}}},
        "representations": {"shift": {"0.4": [{"layer": 1, "cosine": 0.9, "cka": 0.8},
                                              {"layer": 2, "cosine": 0.7 + 0.01 * seed, "cka": 0.6}]},
                            "geometry": []}})


def write_study(tmp_path: Path) -> Path:
    """Three seeds of fine-tuning scores (MLM above AR) and diagnostics, the findings below read."""
    for seed, (mlm, ar, nsp) in enumerate([(0.70, 0.60, 0.72), (0.75, 0.62, 0.70), (0.72, 0.61, 0.74)], 1):
        finetune_result(tmp_path, "mlm", seed, "conll2003-full", mlm)
        finetune_result(tmp_path, "ar", seed, "conll2003-full", ar)
        finetune_result(tmp_path, "mlm_nsp", seed, "conll2003-full", nsp)
        diagnostics(tmp_path, "mlm", seed, mrf_u=20.0 + seed, unary_u=15.0, gaps=[(1, 0.5 + 0.1 * seed), (4, 0.1), (7, 0.0)])
        diagnostics(tmp_path, "ar", seed, mrf_u=1.0, unary_u=1.0, gaps=[(1, 0.3), (3, 0.05 * seed)], candidates=20)
    return tmp_path


FINDINGS = {
    "bidirectional": {"claim": "MLM tags better", "anchor": "BERT Table 5", "direction": "greater",
                      "a": F1, "b": {**F1, "arm": "ar"}},
    "backwards": {"direction": "less", "a": F1, "b": {**F1, "arm": "ar"}},
    "nsp": {"direction": "greater", "a": F1, "b": {**F1, "arm": "mlm_nsp"}},
    "mrf": {"direction": "greater", "a": {"arm": "mlm", "pairwise": {"kind": "random", "row": "mrf", "column": "u_ppl"}},
            "b": {"arm": "mlm", "pairwise": {"kind": "random", "row": "mlm_unary", "column": "u_ppl"}}},
    "local_mlm": {"direction": "greater", "a": {"arm": "mlm", "gap": {"min_distance": 1, "max_distance": 1}},
                  "b": {"arm": "mlm", "gap": {"min_distance": 3}}},
    "local_ar": {"direction": "greater", "a": {"arm": "ar", "gap": {"min_distance": 1, "max_distance": 1}},
                 "b": {"arm": "ar", "gap": {"min_distance": 3}}},
    "shift": {"direction": "greater", "a": {"arm": "ar", "representation": {"measure": "shift_cosine@0.4", "layer": "last"}},
              "b": {"arm": "mlm", "representation": {"measure": "shift_cosine@0.4", "layer": 1}}},
}


def gate_report(root: Path, arm: str, seed: int, below: float, mc_stderr: float | None = None) -> None:
    """A likelihood section on the common scale (`armlm evaluate`): nats below the unigram of the same targets; a
    Monte-Carlo standard error where the figure is the bound's estimate (an exact likelihood has none)."""
    path = root / arm / f"seed{seed}" / "diagnostics" / "diagnostics.json"
    report = json.loads(path.read_text()) if path.is_file() else {}
    likelihood = {"nll_per_token": 4.0, "below_unigram": below, "blocks_fingerprint": "b"}
    write(path, {**report, "likelihood": likelihood | ({"mc_stderr": mc_stderr} if mc_stderr is not None else {})})


GATED = {"arms": {"mlm": {}, "ar": {}, "mlm_nsp": {}, "mlm_late": {"from_arm": "mlm"}},
         "gate": {"min_below_unigram": 0.5}}


def pretraining_summary(root: Path, arm: str, seed: int, val_likelihood: float | None, objective: str) -> None:
    write(root / arm / f"seed{seed}" / "pretrain" / "summary.json", {
        "objective": objective, "steps": 10, "tokens_seen": 1000, "pred_tokens_seen": 900, "val_loss": 5.0,
        "val_loss_kind": "next_token", "unigram_baseline": 6.0, "wall_seconds": 1.0, "metrics": {},
        "val_likelihood": val_likelihood, "flops_seen": 1e9, "epochs": 1.0})


def task_result(root: Path, arm: str, seed: int, task: str, metrics: dict[str, float]) -> None:
    write(root / arm / f"seed{seed}" / "finetune" / f"{task}-full" / "results.json", {
        "task": task, "seed": seed, "mode": "full", "attention": "bidirectional", "metrics": {"validation": metrics},
        "majority_baseline": {"validation": {k: 0.0 for k in metrics}}, "input_mask_share": 0.0,
        "primary_metric": next(iter(metrics))})


def likelihood_report(root: Path, arm: str, seed: int, nll: float, fingerprint: str = "same-blocks") -> None:
    write(root / arm / f"seed{seed}" / "diagnostics" / "diagnostics.json",
          {"likelihood": {"nll_per_token": nll, "blocks_fingerprint": fingerprint}})
