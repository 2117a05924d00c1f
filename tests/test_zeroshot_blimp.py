"""BLiMP's reader, pair outcomes, macro accuracies with their bootstrap, and the release's models over the same
paradigms, on hand-made folders."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from armlm.datamodules.tokenizer import TokenizerSettings, train_tokenizer
from armlm.zeroshot.blimp import (
    Paradigm,
    accuracy_table,
    pair_outcomes,
    pair_ties,
    published_beside,
    read_blimp,
    read_published,
)
from armlm.zeroshot.run import context_block, encode_paradigms, markdown, run_zeroshot, within_length, zeroshot_config
from tests.helpers.blimp import write_paradigm


@pytest.fixture
def four_pairs(tmp_path: Path) -> Path:
    write_paradigm(tmp_path, "agr_1", "agreement", "morphology", [("the cat runs", "the cat run"),
                                                                  ("the cats run", "the cats runs")])
    write_paradigm(tmp_path, "island_1", "islands", "syntax", [("who left", "who did left"),
                                                               ("what fell", "what did fell")])
    return tmp_path


SCORES = {"the cat runs": -5.0, "the cat run": -6.0,  # right
          "the cats run": -7.0, "the cats runs": -7.0,  # a tie counts as wrong
          "who left": -3.0, "who did left": -9.0,  # right
          "what fell": -8.0, "what did fell": -4.0}  # wrong


def test_accuracy_per_paradigm_phenomenon_field_and_overall_is_a_macro_average(four_pairs):
    paradigms = read_blimp(four_pairs)
    assert [p.uid for p in paradigms] == ["agr_1", "island_1"]
    outcomes = pair_outcomes(paradigms, SCORES)
    assert outcomes["agr_1"].tolist() == [True, False] and outcomes["island_1"].tolist() == [True, False]
    rows = {(r["level"], r["name"]): r for r in accuracy_table(paradigms, outcomes, resamples=2000)}
    assert rows[("overall", "overall")]["accuracy"] == 0.5 and rows[("overall", "overall")]["pairs"] == 4
    assert rows[("field", "syntax")]["accuracy"] == 0.5 and rows[("phenomenon", "agreement")]["paradigms"] == 1
    # a two-pair paradigm at 1/2: its resampled accuracy is 0, 1/2 or 1
    assert rows[("paradigm", "agr_1")]["ci_low"] == 0.0 and rows[("paradigm", "agr_1")]["ci_high"] == 1.0


def test_a_tie_counts_as_wrong_and_is_counted_beside_accuracy(four_pairs):
    """lm-evaluation-harness's rule (a tie is wrong); the BabyLM 2025 pipeline's (the first of two equal scores, the
    good sentence) would count it right: accuracy there is this one plus the ties' share."""
    paradigms = read_blimp(four_pairs)
    tied = {**SCORES, **{bad: SCORES[good] for p in paradigms for good, bad in zip(p.good, p.bad)}}  # every pair
    outcomes, ties = pair_outcomes(paradigms, tied), pair_ties(paradigms, tied)
    rows = {(r["level"], r["name"]): r for r in accuracy_table(paradigms, outcomes, resamples=100, ties=ties)}
    overall = rows[("overall", "overall")]
    assert overall["accuracy"] == 0.0 and overall["ties"] == overall["pairs"] == 4
    given = {(r["level"], r["name"]): r["ties"] for r in accuracy_table(
        paradigms, pair_outcomes(paradigms, SCORES), resamples=100, ties=pair_ties(paradigms, SCORES))}
    assert given[("overall", "overall")] == given[("paradigm", "agr_1")] == 1 and given[("paradigm", "island_1")] == 0


def test_the_macro_average_weights_paradigms_not_pairs(tmp_path):
    write_paradigm(tmp_path, "big", "t", "f", [(f"g{k}", f"b{k}") for k in range(8)])
    write_paradigm(tmp_path, "small", "t", "f", [("sg", "sb"), ("sg2", "sb2")])
    scores = {**{f"g{k}": 0.0 for k in range(8)}, **{f"b{k}": -1.0 for k in range(8)}, "sg": -1.0, "sb": 0.0,
              "sg2": -1.0, "sb2": 0.0}
    paradigms = read_blimp(tmp_path)
    overall = accuracy_table(paradigms, pair_outcomes(paradigms, scores), resamples=100)[0]
    assert overall["name"] == "overall" and overall["accuracy"] == 0.5  # (1 + 0) / 2, not 8 / 10


def test_the_releases_two_spellings_of_the_syntax_semantics_field_are_one_field(tmp_path):
    write_paradigm(tmp_path, "a", "t", "syntax/semantics", [("g", "b")])
    write_paradigm(tmp_path, "b", "t", "syntax_semantics", [("g2", "b2")])
    paradigms = read_blimp(tmp_path)
    rows = accuracy_table(paradigms, pair_outcomes(paradigms, {"g": 0.0, "b": -1.0, "g2": -1.0, "b2": 0.0}),
                          resamples=10)
    fields = [r for r in rows if r["level"] == "field"]
    assert [(r["name"], r["paradigms"], r["accuracy"]) for r in fields] == [("syntax_semantics", 2, 0.5)]


def test_the_bootstrap_interval_covers_a_known_rate_at_its_level():
    """Paradigms of 200 pairs drawn at 70 %: the 95 % interval of the macro accuracy covers 0.7 about 95 % of the
    time over repeated samples."""
    rng = np.random.default_rng(0)
    paradigms = [Paradigm(f"p{k}", "f", "t", (), ()) for k in range(3)]
    covered = 0
    for trial in range(300):
        outcomes = {p.uid: rng.random(200) < 0.7 for p in paradigms}
        overall = accuracy_table(paradigms, outcomes, resamples=1000, seed=trial)[0]
        covered += overall["ci_low"] <= 0.7 <= overall["ci_high"]
    assert 0.90 <= covered / 300 <= 0.99


def test_malformed_or_empty_folders_are_refused_naming_the_file(tmp_path):
    with pytest.raises(ValueError, match="no BLiMP paradigms"):
        read_blimp(tmp_path)
    (tmp_path / "bad.jsonl").write_text('{"sentence_good": "a"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:1 lacks \['sentence_bad'"):
        read_blimp(tmp_path)
    (tmp_path / "bad.jsonl").write_text("not json\n")
    with pytest.raises(ValueError, match="bad.jsonl:1 is not JSON"):
        read_blimp(tmp_path)
    (tmp_path / "bad.jsonl").write_text("\n")
    with pytest.raises(ValueError, match="holds no pairs"):
        read_blimp(tmp_path)


@pytest.mark.parametrize("setting,line", [
    ("seed=abc", "seed='abc': expected an integer >= 0"),
    ("blimp.max_pairs=some", "blimp.max_pairs='some': expected an integer >= 1, or null"),
    ("bound.draws=1", "bound.draws=1: expected an integer >= 2"),
    ("bootstrap.resamples=0", "bootstrap.resamples=0: expected an integer >= 1"),
    ("tokens_per_pass=0", "tokens_per_pass=0: expected an integer >= 1"),
    ("methods=pll", "methods='pll': expected a list, e.g. methods=[pll]"),
])
def test_each_setting_of_the_wrong_type_or_range_is_one_line_before_blimp_or_the_model_is_read(setting, line):
    """seed=abc ended in int()'s traceback after BLiMP and the model were read (zeroshot.run.ZEROSHOT_RULES)."""
    with pytest.raises(ValueError, match="^" + re.escape(line)):
        run_zeroshot(zeroshot_config(["checkpoint=/nowhere/run", "blimp.dir=/nowhere", setting]))


@pytest.mark.parametrize("max_pairs", [0, -1])
def test_a_max_pairs_that_keeps_no_pair_or_drops_the_last_is_refused(four_pairs, max_pairs):
    """0 kept no pair and was reported as every pair being too long for the checkpoint; -1 sliced each paradigm's
    last pair off without a word."""
    with pytest.raises(ValueError, match=rf"^blimp.max_pairs={max_pairs}; keep at least 1 pair of each paradigm"):
        read_blimp(four_pairs, max_pairs)
    assert [len(p.good) for p in read_blimp(four_pairs, 1)] == [1] * len(read_blimp(four_pairs))


def test_the_release_models_are_averaged_over_the_same_paradigms(four_pairs, tmp_path_factory):
    results = tmp_path_factory.mktemp("release") / "models_summary.jsonl"
    rows = [{"UID": "agr_1", "linguistics_term": "agreement", "ngram": 0.2, "lstm": 0.4, "txl": 0.6, "gpt2": 0.8},
            {"UID": "island_1", "linguistics_term": "islands", "ngram": 0.4, "lstm": 0.6, "txl": 0.8, "gpt2": 1.0},
            {"UID": "overall", "linguistics_term": "overall", "ngram": 0.9, "lstm": 0.9, "txl": 0.9, "gpt2": 0.9}]
    results.write_text("".join(json.dumps(r) + "\n" for r in rows))
    paradigms = read_blimp(four_pairs)
    beside = published_beside(paradigms, read_published(results))
    assert beside[("overall", "overall")]["GPT-2"] == pytest.approx(0.9)  # (0.8 + 1.0) / 2, not the file's 0.9 row
    assert beside[("overall", "overall")]["5-gram"] == pytest.approx(0.3)
    assert beside[("phenomenon", "islands")]["LSTM"] == pytest.approx(0.6)
    # a paradigm the release does not list: no published figure for the groups holding it
    partial = published_beside(paradigms, {"agr_1": read_published(results)["agr_1"]})
    assert ("overall", "overall") not in partial and ("paradigm", "agr_1") in partial
    table = markdown({"pll": accuracy_table(paradigms, pair_outcomes(paradigms, SCORES), resamples=100)}, beside, "# t")
    assert "| overall | overall | 4 | 0.500 [" in table and "| 0.900 |" in table


def test_zeroshot_scores_a_checkpoint_by_each_of_its_methods_and_writes_shared_tags(untrained, four_pairs,
                                                                                 tmp_path_factory):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tags = {}
    for objective, methods in (("ar", ["exact"]), ("mlm", ["pll", "pll_word_l2r", "bound"])):
        out = tmp_path_factory.mktemp(f"zeroshot-{objective}")
        report = run_zeroshot(zeroshot_config([f"checkpoint={untrained[objective]}", f"blimp.dir={four_pairs}",
                                               f"output_dir={out}", "bootstrap.resamples=200"]))
        assert report["settings"]["methods"] == methods and report["blimp"]["sentences"] == 8
        written = json.loads((out / "zeroshot.json").read_text())
        for method in methods:
            overall = written["blimp"]["results"][method][0]
            assert overall["name"] == "overall" and overall["accuracy"] in (0.0, 0.25, 0.5, 0.75, 1.0)
        assert "| overall | overall | 4 |" in (out / "zeroshot.md").read_text()
        events = EventAccumulator(str(out / "tensorboard"))
        events.Reload()
        tags[objective] = {t.split("/", 2)[2] for t in events.Tags()["scalars"]}
    assert tags["ar"] == tags["mlm"] and "overall" in tags["ar"] and "field/syntax" in tags["ar"]
    with pytest.raises(ValueError, match="cannot be scored by 'pll'"):
        run_zeroshot(zeroshot_config([f"checkpoint={untrained['ar']}", f"blimp.dir={four_pairs}",
                                      "methods=[pll]", "output_dir=/nonexistent"]))


def test_pairs_with_a_sentence_longer_than_the_trained_positions_are_left_out_and_counted(four_pairs):
    tokenizer = train_tokenizer(["the cat runs who left what did fell " * 30], TokenizerSettings(vocab_size=40,
                                                                                                   min_frequency=1))
    paradigms = read_blimp(four_pairs)  # with [CLS], "the cat runs" is 8 positions, "the cats runs" 9, the rest <= 8
    encoded = encode_paradigms(tokenizer, paradigms)
    kept, left_out, emptied = within_length(paradigms, encoded, trained=8)
    assert left_out == 1 and [len(p.good) for p in kept] == [1, 2] and kept[0].bad == ("the cat run",) and not emptied
    assert within_length(paradigms, encoded, trained=None) == (paradigms, 0, [])
    long = Paradigm("long_1", "syntax", "islands", ("the cat runs who left what did fell",), ("who left",))
    kept, left_out, emptied = within_length([*paradigms, long], encode_paradigms(tokenizer, [*paradigms, long]),
                                            trained=8)  # long_1 loses its one pair
    assert [p.uid for p in kept] == ["agr_1", "island_1"] and left_out == 2 and emptied == ["long_1"]
    with pytest.raises(ValueError, match="every BLiMP pair"):
        within_length(paradigms, encoded, trained=5)


def test_zeroshot_also_scores_every_sentence_after_one_fixed_context_block(untrained, four_pairs, tmp_path):
    text = tmp_path / "held_out.txt"
    text.write_text(" = Heading = \n\nthe river runs past the old mill and the town beyond it\n")
    out = tmp_path / "run"
    report = run_zeroshot(zeroshot_config([f"checkpoint={untrained['mlm']}", f"blimp.dir={four_pairs}",
                                           f"output_dir={out}", "bootstrap.resamples=200", "methods=[pll]",
                                           f"blimp.context.file={text}", "blimp.context.tokens=6"]))
    assert set(report["blimp"]["results"]) == {"pll", "pll@context"}
    assert report["settings"]["context"] == {"file": str(text), "tokens": 6}
    assert set(report["blimp"]["seconds"]) == {"pll", "pll@context"}
    assert report["blimp"]["log_prob_per_token"]["pll"] != report["blimp"]["log_prob_per_token"]["pll@context"]
    with pytest.raises(ValueError, match="fewer than blimp.context.tokens=500"):
        run_zeroshot(zeroshot_config([f"checkpoint={untrained['mlm']}", f"blimp.dir={four_pairs}",
                                      f"output_dir={out}", f"blimp.context.file={text}", "blimp.context.tokens=500"]))
    with pytest.raises(FileNotFoundError, match="blimp.context.file"):
        run_zeroshot(zeroshot_config([f"checkpoint={untrained['mlm']}", f"blimp.dir={four_pairs}",
                                      f"output_dir={out}", "blimp.context.file=/nonexistent.txt"]))


def test_context_block_takes_running_text_without_headings(tmp_path):
    tokenizer = train_tokenizer(["the river runs past the old mill heading " * 30],
                                TokenizerSettings(vocab_size=40, min_frequency=1))
    text = tmp_path / "held_out.txt"
    text.write_text(" = heading = \n\n the river runs\n\n = = heading = = \n past the old mill\n")
    expected = tokenizer.encode("the river runs past the old mill", add_special_tokens=False).ids
    assert context_block(tokenizer, str(text), 5) == tuple(expected[:5])
    assert context_block(tokenizer, None, 8) == () and context_block(tokenizer, str(text), 0) == ()
