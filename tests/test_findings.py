"""Findings read from a study folder: per-seed values of each side, paired differences and verdicts."""

import json
from pathlib import Path

import pandas as pd
import pytest

from analysis.findings import findings_table, write_findings
from analysis.study import finetuning_runs, per_checkpoint

F1 = {"arm": "mlm", "finetune": "conll2003-full", "metric": "f1"}


def write(path: Path, content: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(content))


def finetune_result(root: Path, arm: str, seed: int, folder: str, f1: float, finetune_seed: int | None = None) -> None:
    write(root / arm / f"seed{seed}" / "finetune" / folder / "results.json", {
        "task": "conll2003", "seed": finetune_seed or seed, "mode": "features" if "features" in folder else "full",
        "attention": "bidirectional", "metrics": {"validation": {"f1": f1}},
        "majority_baseline": {"validation": {"f1": 0.0}}, "input_mask_share": 0.0})


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


@pytest.fixture
def study(tmp_path: Path) -> Path:
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


def test_verdicts_from_a_study_folder(study):
    table = findings_table(study, FINDINGS).set_index("finding")
    assert table.loc["bidirectional", "verdict"] == "reproduced"
    assert table.loc["bidirectional", "difference"] == pytest.approx((0.10 + 0.13 + 0.11) / 3)
    assert table.loc["bidirectional", "n"] == 3 and table.loc["bidirectional", "seeds"] == [1, 2, 3]
    assert table.loc["backwards", "verdict"] == "contradicted"
    nsp = table.loc["nsp"]  # differences -0.02, +0.05, -0.02: straddles zero
    assert nsp["verdict"] == "unresolved" and nsp["ci_low"] < 0 < nsp["ci_high"] and "seeds" in nsp["note"]
    assert table.loc["mrf", "verdict"] == "reproduced" and table.loc["mrf", "difference"] == pytest.approx(7.0)
    # gap at distance 1 (0.6, 0.7, 0.8) against the mean over distances >= 3 (0.05)
    assert table.loc["local_mlm", "difference"] == pytest.approx(0.7 - 0.05)
    # the ar diagnostics were restricted to 20 candidates: refused, whatever the numbers say
    assert table.loc["local_ar", "verdict"] == "unresolved" and "not comparable" in table.loc["local_ar", "note"]
    # ar's last layer (0.71, 0.72, 0.73) against mlm's first (0.9): the other way
    assert table.loc["shift", "verdict"] == "contradicted"
    assert table.loc["shift", "a_mean"] == pytest.approx(0.72)


def test_finetuning_seeds_are_reduced_to_their_median_per_checkpoint(tmp_path):
    for j, f1 in enumerate([0.5, 0.9, 0.6], 1):
        finetune_result(tmp_path, "mlm", 1, f"conll2003-full-ft{j}", f1, finetune_seed=100 + j)
    for j, f1 in enumerate([0.4, 0.45, 0.1], 1):
        finetune_result(tmp_path, "ar", 1, f"conll2003-full-ft{j}", f1, finetune_seed=100 + j)
    runs = finetuning_runs(tmp_path)
    assert set(runs["variant"]) == {"full"} and sorted(runs["finetune_seed"].unique()) == [101, 102, 103]
    medians = per_checkpoint(runs).set_index("arm")
    assert medians.loc["mlm", "value"] == 0.6 and medians.loc["ar", "value"] == 0.4
    assert medians.loc["mlm", "finetune_runs"] == 3
    table = findings_table(tmp_path, {"one": FINDINGS["bidirectional"]})
    assert table.loc[0, "difference"] == pytest.approx(0.2) and table.loc[0, "verdict"] == "unresolved"  # one seed


def test_findings_files_are_written(study):
    written = write_findings(study, {k: FINDINGS[k] for k in ("bidirectional", "nsp", "local_ar")})
    text = (study / "report" / "findings.md").read_text()
    assert "**reproduced**" in text and "**unresolved**" in text and "BERT Table 5" in text
    assert "Pretraining seeds [1, 2, 3]" in text
    assert len(pd.read_csv(written[1])) == 3


def likelihood_report(root: Path, arm: str, seed: int, nll: float, fingerprint: str = "same-blocks") -> None:
    write(root / arm / f"seed{seed}" / "diagnostics" / "diagnostics.json",
          {"likelihood": {"nll_per_token": nll, "blocks_fingerprint": fingerprint}})


def pretraining_summary(root: Path, arm: str, seed: int, val_likelihood: float | None, objective: str) -> None:
    write(root / arm / f"seed{seed}" / "pretrain" / "summary.json", {
        "objective": objective, "steps": 10, "tokens_seen": 1000, "pred_tokens_seen": 900, "val_loss": 5.0,
        "val_loss_kind": "next_token", "unigram_baseline": 6.0, "wall_seconds": 1.0, "metrics": {},
        "val_likelihood": val_likelihood, "flops_seen": 1e9, "epochs": 1.0})


F6 = {"direction": "greater", "a": {"arm": "masked_diffusion", "likelihood": "nll_per_token"},
      "b": {"arm": "ar", "likelihood": "nll_per_token"}}


def test_likelihoods_compare_only_on_the_same_held_out_blocks(tmp_path):
    for seed, (bound, exact) in enumerate([(5.9, 3.9), (5.8, 4.0), (6.0, 3.95)], 1):
        likelihood_report(tmp_path, "masked_diffusion", seed, bound)
        likelihood_report(tmp_path, "ar", seed, exact)
    row = findings_table(tmp_path, {"F6": F6}).iloc[0]
    assert row["verdict"] == "reproduced" and row["difference"] == pytest.approx((2.0 + 1.8 + 2.05) / 3)
    likelihood_report(tmp_path, "ar", 2, 4.0, fingerprint="other-blocks")
    row = findings_table(tmp_path, {"F6": F6}).iloc[0]
    assert row["verdict"] == "unresolved" and "different held-out blocks" in row["note"] and "[2]" in row["note"]


def test_a_side_relative_to_another_arm_is_the_change_between_them(tmp_path):
    """F7's form: the NLL change from 4 to 16 epochs, masked diffusion's against AR's."""
    changes = {"ar": (3.0, 3.2), "mdlm": (5.5, 5.0)}  # (4 epochs, 16 epochs): AR worse, MDLM better
    for seed in (1, 2, 3):
        for objective, (at4, at16) in changes.items():
            pretraining_summary(tmp_path, f"{objective}_e4", seed, at4 + 0.01 * seed, objective)
            pretraining_summary(tmp_path, f"{objective}_e16", seed, at16 + 0.02 * seed, objective)
    gain = {"direction": "less",
            "a": {"arm": "mdlm_e16", "pretraining": "val_likelihood", "relative_to": "mdlm_e4"},
            "b": {"arm": "ar_e16", "pretraining": "val_likelihood", "relative_to": "ar_e4"}}
    row = findings_table(tmp_path, {"F7": gain}).iloc[0]
    # per seed: (-0.5 + 0.01 s) - (0.2 + 0.01 s) = -0.7
    assert row["difference"] == pytest.approx(-0.7) and row["verdict"] == "reproduced"
    assert row["a"] == "mdlm_e16: pretraining val_likelihood minus mdlm_e4's"
