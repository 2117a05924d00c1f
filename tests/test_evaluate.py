"""`armlm evaluate`: sentences and pairs, the run end to end on tiny checkpoints, its outputs and errors."""

import json
import math
import re
from collections import Counter
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tokenizers import Tokenizer

from armlm.common.vocabulary import CLS, EOD, MASK, PAD, SEP, UNK
from armlm.datamodules.corpora import EmbeddedWikipedia
from armlm.diagnostics.likelihood import blocks_fingerprint, held_out_blocks
from armlm.diagnostics.run import evaluate_config as composed_evaluate_config
from armlm.diagnostics.run import run_diagnostics, setup
from armlm.diagnostics.sentences import sample_pairs, split_sentences
from armlm.models.backbone import ModelConfig
from tests.helpers.checkpoints import save_checkpoint
from tests.helpers.vocabularies import word_tokenizer_json

REPO = Path(__file__).resolve().parents[1]


def evaluate_config(out: Path, *overrides: str):
    return composed_evaluate_config([f"output_dir={out}", *overrides])


def test_sentences_are_split_at_sentence_ends_and_lines():
    text = 'The cat sat. "Then it left!" it said? no split here. 3 dogs ran.\nA new line'
    assert split_sentences(text) == ["The cat sat.", '"Then it left!" it said? no split here.', "3 dogs ran.",
                                     "A new line"]


def test_pairs_are_inside_the_sentence_and_reproducible():
    sentences = [[2] + list(range(10, 10 + n)) for n in (8, 9, 12, 30, 8)]
    contiguous = sample_pairs(sentences, 5, "contiguous", seed=3)
    random = sample_pairs(sentences, 5, "random", seed=3)
    assert [p.sentence for p in contiguous] == [p.sentence for p in random]  # the same text for both kinds
    assert all(p.j == p.i + 1 and p.i >= 1 and p.j < len(sentences[p.sentence]) for p in contiguous)
    assert all(1 <= p.i < p.j < len(sentences[p.sentence]) for p in random)
    assert sample_pairs(sentences, 5, "random", seed=3) == random
    assert sample_pairs(sentences, 5, "random", seed=4) != random
    with pytest.raises(ValueError, match="only 5 sentences qualify"):
        sample_pairs(sentences, 6, "random", seed=3)


@pytest.mark.slow
def test_evaluate_writes_the_same_tags_for_ar_and_mlm(tiny_pretrained, tmp_path):
    reports, tags = {}, {}
    for family in ("mlm", "ar"):  # the AR is scored on the MLM's candidate sets
        out = tmp_path / family
        shared = [f"candidates_from={tmp_path / 'mlm' / 'diagnostics.json'}"] if family == "ar" else []
        cfg = evaluate_config(out, f"checkpoint={tiny_pretrained[family]}", "pairs=3", "candidates=6",
                              "sentences.max_tokens=20", *shared)
        reports[family] = run_diagnostics(cfg)
        saved = json.loads((out / "diagnostics.json").read_text())
        assert saved["pairwise"].keys() == {"contiguous", "random"}
        assert "## random pairs (3)" in (out / "diagnostics.md").read_text()
        events = EventAccumulator(str(out / "tensorboard"))
        events.Reload()
        tags[family] = set(events.Tags()["scalars"])

    mlm, ar = reports["mlm"]["pairwise"]["random"], reports["ar"]["pairwise"]["random"]
    for key in ("pair", "cand_i", "cand_j"):
        assert ar["per_pair"][key] == mlm["per_pair"][key]
    assert all(len(c) == 6 and len(set(c)) == 6 for c in mlm["per_pair"]["cand_i"])
    assert set(mlm["rows"]) == {"mlm", "mrf", "mrf_logit", "hcb", "ag", "chain_rule", "mlm_unary"}
    assert set(ar["rows"]) == {"ar_exact"}
    # MLM's own factorisation has no dependence between the two tokens, by construction.
    assert abs(mlm["gap_mean"]["mlm"]) < 1e-9
    assert mlm["rows"]["ag"]["kl_all"] <= min(mlm["rows"][n]["kl_all"] for n in ("mrf", "hcb", "mlm")) + 1e-9
    assert reports["ar"]["sequence"]["ppl"] > 1 and reports["mlm"]["sequence"]["pseudo_ppl"] > 1
    shared = {f"diagnostics/{kind}/{name}" for kind in ("contiguous", "random")
              for name in ("joint/p_ppl", "joint/u_ppl", "gap", "gap_by_distance")}
    assert shared <= tags["ar"] & tags["mlm"]
    # Perplexity and pseudo-perplexity are different quantities: never one tag.
    assert "diagnostics/sequence/ppl" in tags["ar"] - tags["mlm"]
    assert "diagnostics/sequence/pseudo_ppl" in tags["mlm"] - tags["ar"]
    # Candidates: K per position, so an MLM pair costs 4 + 2(K - 1) passes and an AR pair 1 + K (+ K^2
    # unless j is the last token).
    assert mlm["forward_passes"] == 3 * (4 + 2 * 5) and 3 * 7 <= ar["forward_passes"] <= 3 * (7 + 36)


@pytest.mark.slow  # extracts the embedded Wikipedia and counts its train split: seconds
@pytest.mark.parametrize("objective", ["ar", "mlm"])
def test_the_likelihood_section_reads_the_model_against_the_train_unigram_of_the_same_targets(objective, tmp_path):
    """An untrained checkpoint whose word vocabulary is the validation split's repeated words (so some held-out
    targets are [UNK], as in the train split); the unigram is recomputed here by brute force."""
    corpus = EmbeddedWikipedia(val_fraction=0.05)  # data=enwiki, evaluate's default
    splits = corpus.load()
    words = Counter(w.lower() for d in splits["validation"] for w in re.findall(r"\w+|[^\w\s]+", d))
    tokenizer_json = word_tokenizer_json([w for w, n in words.items() if n >= 2])
    tokenizer = Tokenizer.from_str(tokenizer_json)
    config = ModelConfig(vocab_size=tokenizer.get_vocab_size(), max_len=16, d_model=8, n_layers=1, n_heads=2, d_ff=16)
    checkpoint = save_checkpoint(tmp_path / "untrained.ckpt", objective, config, tokenizer_json=tokenizer_json)
    report = run_diagnostics(evaluate_config(
        tmp_path / "out", f"checkpoint={checkpoint}", "independence=false", "representations.enabled=false",
        "likelihood.block_size=16", "likelihood.blocks=6", "likelihood.draws=2", "likelihood.max_draws=2"))
    part = report["likelihood"]

    blocks = held_out_blocks(corpus, tokenizer, block_size=16, count=6)
    assert blocks_fingerprint(blocks) == part["blocks_fingerprint"]  # the blocks the report scored
    ids = {t: tokenizer.token_to_id(t) for t in (PAD, UNK, CLS, SEP, MASK, EOD)}
    train = Counter()  # the train split as pretraining packs it: each document's ids, then [EOD]
    for document in splits["train"]:
        encoded = tokenizer.encode(document, add_special_tokens=False).ids
        train.update(encoded + [ids[EOD]] if encoded else [])
    excluded = {ids[t] for t in (PAD, CLS, SEP, MASK, EOD)}
    z = sum(train[v] + 0.5 for v in range(tokenizer.get_vocab_size()) if v not in excluded)
    targets = [t for row in blocks.tolist() for t in row[1:] if t != ids[EOD]]
    assert ids[UNK] in targets and len(targets) == part["target_tokens"] - part["eod_targets"]
    unigram = -sum(math.log((train[t] + 0.5) / z) for t in targets) / len(targets)
    assert part["unigram_nll_per_token_without_eod"] == pytest.approx(unigram, rel=1e-9)
    assert part["below_unigram"] == pytest.approx(unigram - part["nll_per_token_without_eod"], rel=1e-9)
    assert "below the unigram" in (tmp_path / "out" / "diagnostics.md").read_text()


def test_bad_settings_name_the_fix(tmp_path):
    checkpoint = save_checkpoint(tmp_path / "untrained.ckpt", "mlm")  # settings fail before any scoring
    with pytest.raises(ValueError, match="kinds="):
        run_diagnostics(evaluate_config(tmp_path, f"checkpoint={checkpoint}", "kinds=[nearby]"))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        run_diagnostics(evaluate_config(tmp_path, f"checkpoint={tmp_path / 'nothing.ckpt'}"))
    with pytest.raises(ValueError, match=r"^pairs=0; ask for at least one pair"):  # before the checkpoint is read
        run_diagnostics(evaluate_config(tmp_path, f"checkpoint={tmp_path / 'nothing.ckpt'}", "pairs=0"))
    assert not (tmp_path / "diagnostics.json").exists()


@pytest.mark.parametrize("setting,line", [
    ("seed=abc", "seed='abc': expected an integer >= 0"),
    ("pairs=many", "pairs='many': expected an integer >= 1"),
    ("likelihood.draws=1", "likelihood.draws=1: expected an integer >= 2"),
    ("likelihood.target_rel_stderr=0", "likelihood.target_rel_stderr=0: expected a number > 0"),
    ("ag.tol=small", "ag.tol='small': expected a number > 0"),
    ("independence=maybe", "independence='maybe': expected true or false"),
    # settings that hold together: each was refused only by its measure, after the pairwise scoring, and not at all
    # for a checkpoint without that measure (an AR one has no [MASK] shift)
    ("likelihood.max_draws=2", "likelihood.max_draws=2 is below likelihood.draws=4; give max_draws >= draws"),
    ("sentences.max_tokens=4", "sentences.max_tokens=4 is below sentences.min_tokens=8"),
    ("representations.mask_rates=[0.15,1.5]", "representations.mask_rates=[0.15, 1.5]; give a list of rates in (0, 1)"),
])
def test_each_setting_of_the_wrong_type_or_range_is_one_line_before_the_checkpoint_is_read(tmp_path, setting, line):
    """seed=abc ended in int()'s traceback after the checkpoint was loaded; a draw count of 1 only deep in the
    likelihood estimate (diagnostics.run.EVALUATE_RULES)."""
    with pytest.raises(ValueError, match="^" + re.escape(line)):
        run_diagnostics(evaluate_config(tmp_path, f"checkpoint={tmp_path / 'nothing.ckpt'}", setting))


def test_a_likelihood_block_longer_than_the_checkpoint_takes_is_refused_when_it_is_opened(tmp_path):
    """It was refused by the likelihood measure, after the pairwise scoring (minutes at real sizes)."""
    checkpoint = save_checkpoint(tmp_path / "untrained.ckpt", "mlm")
    with pytest.raises(ValueError, match=r"^likelihood.block_size=10000; use 2\.\.16 "):
        setup(evaluate_config(tmp_path, f"checkpoint={checkpoint}", "likelihood.block_size=10000"))


@pytest.mark.slow
def test_more_pairs_than_sentences_name_the_fix(tiny_pretrained, tmp_path):
    with pytest.raises(ValueError, match="pairs=100000 but only"):
        run_diagnostics(evaluate_config(tmp_path, f"checkpoint={tiny_pretrained['mlm']}", "pairs=100000"))
    assert not (tmp_path / "diagnostics.json").exists()


@pytest.mark.slow
def test_candidates_from_another_run_must_describe_the_same_pairs(tiny_pretrained, tmp_path):
    first = tmp_path / "first"
    run_diagnostics(evaluate_config(first, f"checkpoint={tiny_pretrained['mlm']}", "pairs=2", "candidates=4",
                                    "kinds=[random]"))
    with pytest.raises(ValueError, match="its random pairs differ"):
        run_diagnostics(evaluate_config(tmp_path / "second", f"checkpoint={tiny_pretrained['ar']}", "pairs=2",
                                        "kinds=[random]", "seed=2", f"candidates_from={first / 'diagnostics.json'}"))
    with pytest.raises(ValueError, match="no per-pair candidates for contiguous"):
        run_diagnostics(evaluate_config(tmp_path / "third", f"checkpoint={tiny_pretrained['ar']}", "pairs=2",
                                        f"candidates_from={first / 'diagnostics.json'}"))


@pytest.mark.slow
def test_notebook_runs_the_diagnostics_and_plots_the_gap(tiny_pretrained, tmp_path, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    from armlm.analysis.tables.diagnostics_tables import find_reports, gap_by_distance, load_reports, pairwise_table
    from armlm.diagnostics.reuse import run_or_reuse

    monkeypatch.setenv("ARMLM_CHECKPOINTS", f"{tiny_pretrained['mlm']},{tiny_pretrained['ar']}")
    for name, value in (("DATA", "enwiki"), ("PAIRS", "4"), ("CANDIDATES", "5"), ("OUT", str(tmp_path))):
        monkeypatch.setenv(f"ARMLM_DIAG_{name}", value)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    notebook = nbformat.read(REPO / "notebooks" / "diagnostics.ipynb", as_version=4)
    NotebookClient(notebook, timeout=300, resources={"metadata": {"path": str(REPO / "notebooks")}}).execute()
    assert (tmp_path / "gap_by_distance.png").stat().st_size > 10_000

    paths = find_reports(tmp_path)
    reports = load_reports(paths)
    table = pairwise_table(reports)
    assert len(table) == 2 * (1 + 7)  # two kinds x (AR exact + 6 MLM constructions + MLM unary)
    mlm, ar = (reports[path.parent.name] for path in paths)
    assert ar["candidates_from"] == str(paths[0]) and mlm["candidates_from"] is None
    assert ar["pairwise"]["random"]["per_pair"]["cand_j"] == mlm["pairwise"]["random"]["per_pair"]["cand_j"]
    gaps = gap_by_distance(mlm)
    assert gaps.pairs.sum() == 2 * 4 and gaps["bin"].iloc[0] == "1"  # contiguous pairs all at distance 1
    # Same settings: the report is reused, not recomputed.
    before = paths[0].stat().st_mtime_ns
    settings = ["data=enwiki", "pairs=4", "candidates=5", f"data_dir={mlm['settings']['data_dir']}"]
    assert run_or_reuse(tiny_pretrained["mlm"], paths[0].parent, settings) == paths[0]
    assert paths[0].stat().st_mtime_ns == before
