"""bench/launch_bound.py's arithmetic and settings (its processes run in the lease's dry run, tests/test_gpu_lease.py)."""

from __future__ import annotations

import pytest

from bench.launch_bound import aggregate, parse_args, throughput_argv


def test_processes_together_are_counted_over_the_span_from_the_first_start_to_the_last_end():
    # two processes of 100 tokens each: 0-2 s and 1-3 s, so 200 tokens in 3 s together and 50 tokens/s each
    result = aggregate([(0.0, 2.0), (1.0, 3.0)], tokens_per_process=100)
    assert result["aggregate_tokens_per_s"] == pytest.approx(200 / 3)
    assert result["per_process_tokens_per_s"] == pytest.approx(50)
    alone = aggregate([(5.0, 7.0)], tokens_per_process=100)
    assert alone["aggregate_tokens_per_s"] == alone["per_process_tokens_per_s"] == pytest.approx(50)


def test_a_setting_names_a_mode_and_a_count_and_each_process_runs_the_study_shape_compiled():
    args = parse_args(["--settings", "reduce-overhead:4"])
    argv = throughput_argv(args, "reduce-overhead")
    assert argv[argv.index("--compile-mode") + 1] == "reduce-overhead" and "--compile" in argv
    shape = {flag: argv[argv.index(flag) + 1] for flag in ("--d-model", "--vocab-size", "--seq-len", "--batch-size")}
    assert shape == {"--d-model": "256", "--vocab-size": "1024", "--seq-len": "64", "--batch-size": "32"}
    with pytest.raises(SystemExit):
        parse_args(["--settings", "default"])
    assert parse_args(["--dry-run", "--steps", "3"]).steps == 3  # given after the toy settings, it wins
