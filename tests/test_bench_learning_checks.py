"""bench/gpu_learns.py's verdict and fix, and bench/objectives_learn.py's learning criterion, on made-up rows: the
arithmetic that names a culprit and marks a run short (the benches' runs themselves: tests/test_gpu_lease.py)."""

from __future__ import annotations

from bench.gpu_learns import VARIANTS, fix, learns, verdict
from bench.objectives_learn import runs, short, table

LEARNED = {"nonfinite_steps": 0, "val_loss": 5.2, "unigram_baseline": 5.8}
STUCK = {"nonfinite_steps": 0, "val_loss": 6.86, "unigram_baseline": 5.8}
INFINITE = {"nonfinite_steps": 290, "val_loss": 6.9, "unigram_baseline": 5.8}


def rows(**learning: dict) -> dict[str, dict]:
    return {name: {"overrides": overrides, **learning.get(name, STUCK)} for name, overrides in VARIANTS.items()}


def test_a_variant_learns_below_unigram_with_every_norm_finite():
    assert learns(LEARNED) and not learns(STUCK) and not learns({**LEARNED, "nonfinite_steps": 1})
    assert not learns({"error": "CUDA error"})


def test_the_single_change_that_makes_the_failing_step_learn_is_named_and_adopted():
    table_rows = rows(**{"cuDNN attention off": LEARNED, "long blocks": LEARNED, "math attention only": LEARNED,
                         "as of 4 Dec": INFINITE})
    said = verdict(table_rows)
    assert said.startswith("culprit:") and "cuDNN attention off" in said and "long blocks" in said
    assert "eager" not in said  # the eager row did not learn
    assert fix(table_rows) == ["trainer.step.sdpa_backends=[flash,efficient,math]"]
    # a change the tables cannot adopt (block size) is a diagnosis, never the fix
    only_blocks = rows(**{"long blocks": LEARNED})
    assert "long blocks" in verdict(only_blocks) and fix(only_blocks) == []


def test_nothing_to_fix_where_the_failing_step_learns_or_nothing_does():
    assert verdict(rows(**{"as of 4 Dec": LEARNED})).startswith("not reproduced") and fix(rows(**{"as of 4 Dec": LEARNED})) == []
    assert verdict(rows()).startswith("no single change") and fix(rows()) == []


def row(margin, kind="unigram", baseline=5.8, learned=True) -> dict:
    return {"run": "x", "steps": 10, "val_loss": 5.0, "unigram_baseline": 5.8, "own_margin": margin,
            "own_baseline": baseline, "own_baseline_kind": kind, "learned": learned,
            "own_share": None if margin is None else margin / baseline, "wall_seconds": 1.0, "startup_seconds": 0.5}


def test_a_run_is_short_below_half_a_nat_or_below_a_share_of_its_own_baseline():
    assert not short(row(0.6)) and short(row(0.4)) and short(row(0.6, learned=False)) and short(row(None))
    assert short({"run": "x", "error": "exit status 1"})
    # ELECTRA's detection loss: 0.03 nats below a 0.40-nat baseline is a share of 0.075, under 0.08
    assert short(row(0.03, "binary_entropy", 0.40)) and not short(row(0.04, "binary_entropy", 0.40))
    text = table([row(None), row(0.03, "binary_entropy", 0.40)], 0.5)
    assert "| - SHORT |" in text and "0.030 (share 0.075) SHORT" in text


def test_every_objectives_first_block_and_mode_run_first():
    planned = list(runs(["ar", "mlm"], [64, 512], 32, ["compiled", "eager"]))
    assert planned == ["ar/compiled/64", "mlm/compiled/64", "ar/eager/64", "mlm/eager/64", "ar/compiled/512",
                       "mlm/compiled/512", "ar/eager/512", "mlm/eager/512"]
    long_blocks = runs(["ar"], [64, 512], 32, ["eager"])["ar/eager/512"]
    assert "data.batch_size=8" in long_blocks and "trainer.step.compile=false" in long_blocks
