"""Model sources (sources/): every Hugging Face family the installed transformers has loads by path, declares how it
reads, and is scored as its own forward pass says (brute-force oracles: PLL one masked position at a time, the exact
log-probability by the chain rule); an armlm checkpoint and its export read through the Hugging Face path give the
same numbers; what a source cannot do, or a bad input, ends in one line with nothing written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoModelForMaskedLM, AutoTokenizer

from armlm.diagnostics.run import evaluate_config, run_diagnostics
from armlm.interchange.export import export_checkpoint
from armlm.models.attention import BIDIRECTIONAL, CAUSAL
from armlm.sources import open_source
from armlm.zeroshot.run import run_zeroshot, zeroshot_config
from armlm.zeroshot.scoring import encode_sentences
from tests.helpers.hf_models import CAUSAL as CAUSAL_FAMILIES
from tests.helpers.hf_models import MASKED as MASKED_FAMILIES
from tests.helpers.hf_models import POSITIONS
from tests.helpers.lanes import fast_lane_keeps

SENTENCES = ["The cat sat on the mat.", "Who did the children see before they left?", "Many books were written."]
TOLERANCE = 1e-4  # summed log-probabilities of a few tokens, fp32, two ways of running one model


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def framed(folder: Path, text: str) -> tuple[list[int], list[int | None]]:
    """The text as the model's own tokenizer frames it (add_special_tokens=True), a BOS first where it adds none,
    and its word ids: the oracles' input, built without armlm's code."""
    tokenizer = AutoTokenizer.from_pretrained(folder)
    enc = tokenizer(text)
    ids, words = list(enc["input_ids"]), list(enc.word_ids())
    if words[0] is not None:
        ids, words = [tokenizer.bos_token_id, *ids], [None, *words]
    return ids, words


@pytest.mark.parametrize("family", fast_lane_keeps([*MASKED_FAMILIES, *CAUSAL_FAMILIES], keep=["bert", "gpt2"]))
def test_every_family_loads_by_path_and_declares_how_it_reads(hf_models, family):
    source = open_source(hf_models[family])
    tokenizer = AutoTokenizer.from_pretrained(hf_models[family])
    masked = family in MASKED_FAMILIES
    assert source.kind == "huggingface" and source.longest_input == POSITIONS
    assert source.reading.scoring == ("conditionals" if masked else "chain_rule")
    native = "bidirectional" if masked else "causal"  # first; the other where the model obeys a 4D mask (all here)
    assert source.reading.attentions == (native, "causal" if masked else "bidirectional")
    assert source.special.mask == (tokenizer.mask_token_id if masked else None)
    assert source.special.start == (tokenizer.cls_token_id or tokenizer.bos_token_id)
    assert source.special.end == ((tokenizer.sep_token_id or tokenizer.eos_token_id,) if masked else ())
    sentence = encode_sentences(source.tokenizer, SENTENCES[:1], source.special)[0]
    assert list(sentence.ids) == framed(hf_models[family], SENTENCES[0])[0]


def reference_model(folder: Path, auto_class: type) -> torch.nn.Module:
    """The folder's model as transformers loads it, independently of armlm's source (an oracle: a loader that picked
    the wrong head or dropped weights cannot confirm itself), in eval mode and fp32."""
    return auto_class.from_pretrained(folder, torch_dtype=torch.float32).eval()


def zeroshot_scorer(folder: Path):
    from armlm.zeroshot.run import open_scorer
    cfg = zeroshot_config([f"checkpoint={folder}", "blimp.dir=unused", "output_dir=unused"])
    return open_scorer(cfg)


@pytest.mark.parametrize("family", fast_lane_keeps(list(MASKED_FAMILIES), keep=["roberta"]))
def test_pll_is_the_models_own_conditional_one_masked_position_at_a_time(hf_models, family):
    source, scorer = zeroshot_scorer(hf_models[family])
    lm = reference_model(hf_models[family], AutoModelForMaskedLM)  # loaded apart from the code under test
    sentences = encode_sentences(source.tokenizer, SENTENCES, source.special)
    for method in ("pll", "pll_word_l2r"):
        got = scorer.score(sentences, method, progress=False).log_prob
        for k, text in enumerate(SENTENCES):
            ids, words = framed(hf_models[family], text)
            total = 0.0
            for t, word in enumerate(words):
                if word is None:
                    continue  # the frame's tokens are never scored
                masked = torch.tensor(ids)
                later = [q for q in range(t + 1, len(ids)) if words[q] == word] if method == "pll_word_l2r" else []
                masked[[t, *later]] = source.special.mask
                with torch.no_grad():
                    log_probs = lm(input_ids=masked[None]).logits[0, t].double().log_softmax(-1)
                total += float(log_probs[ids[t]])
            assert got[k] == pytest.approx(total, abs=TOLERANCE), (method, text)


@pytest.mark.parametrize("family", fast_lane_keeps(list(CAUSAL_FAMILIES), keep=["llama"]))
def test_exact_is_the_chain_rule_of_the_models_own_logits(hf_models, family):
    source, scorer = zeroshot_scorer(hf_models[family])
    assert scorer.methods == ("exact",)
    got = scorer.score(encode_sentences(source.tokenizer, SENTENCES, source.special), "exact", progress=False)
    lm = reference_model(hf_models[family], AutoModelForCausalLM)
    for k, text in enumerate(SENTENCES):
        ids = torch.tensor(framed(hf_models[family], text)[0])
        with torch.no_grad():
            log_probs = lm(input_ids=ids[None]).logits[0].double().log_softmax(-1)
        chain = sum(float(log_probs[t - 1, ids[t]]) for t in range(1, len(ids)))
        assert got.log_prob[k] == pytest.approx(chain, abs=TOLERANCE)
        assert got.tokens[k] == len(ids) - 1


@pytest.mark.parametrize("family", fast_lane_keeps(["bert", "gpt2"], keep=["gpt2"]))
def test_zeroshot_and_evaluate_run_on_a_hugging_face_folder_with_units_that_compare(hf_models, family, blimp_dir,
                                                                                     tmp_path):
    report = run_zeroshot(zeroshot_config([f"checkpoint={hf_models[family]}", f"blimp.dir={blimp_dir}",
                                           f"output_dir={tmp_path / 'zs'}", "bootstrap.resamples=100"]))
    methods = ["pll", "pll_word_l2r", "bound"] if family == "bert" else ["exact"]
    assert list(report["blimp"]["results"]) == methods and report["checkpoint"]["source"] == "huggingface"
    texts = sorted({t for pair in [("The cat sat on the mat.", "The cat sit on the mat."),
                                   ("The dog was running.", "The dog were running."),
                                   ("Who did the man see?", "Who did the man see it?")] for t in pair})
    n_bytes = sum(len(t.encode()) for t in texts)
    for method in methods:
        # each pair's outcome is kept, one character per pair ("1": the good sentence won), so a study can resample
        # pairs within paradigms (analysis.findings.items); its share is the paradigm's accuracy
        kept = report["blimp"]["pair_outcomes"][method]
        paradigms = {r["name"]: r["accuracy"] for r in report["blimp"]["results"][method] if r["level"] == "paradigm"}
        assert set(kept) == set(paradigms) and all(set(bits) <= {"0", "1"} for bits in kept.values())
        assert all(kept[u].count("1") / len(kept[u]) == pytest.approx(paradigms[u]) for u in kept)
        units = report["blimp"]["units"][method]
        nats = units["nll_per_token"] * report["blimp"]["tokens"]
        assert units["bits_per_byte"] == pytest.approx(nats / n_bytes / 0.6931471805599453)
        assert units["nll_per_word"] == pytest.approx(nats / sum(len(t.split()) for t in texts))

    diagnostics = run_diagnostics(evaluate_config([
        f"checkpoint={hf_models[family]}", "pairs=3", "candidates=6", "sentences.max_tokens=20",
        "representations.sentences=4", "likelihood.blocks=2", "likelihood.block_size=32", "likelihood.max_draws=4",
        f"output_dir={tmp_path / 'ev'}"]))
    assert diagnostics["source"] == "huggingface" and set(diagnostics["pairwise"]) == {"contiguous", "random"}
    sequence = diagnostics["sequence"]
    assert sequence["units"]["nll_per_token"] == pytest.approx(-sequence[sequence["units"]["kind"]] / sequence["tokens"])
    assert len(diagnostics["representations"]["geometry"]) == 2  # per layer
    assert bool(diagnostics["representations"]["shift"]) == (family == "bert")  # GPT-2 has no [MASK] to shift it
    assert diagnostics["likelihood"]["block_size"] == 32
    assert (tmp_path / "ev" / "diagnostics.md").is_file()


def test_a_decoder_is_refused_what_needs_a_mask_and_reads_both_ways_as_its_mask_says(hf_models, blimp_dir, tmp_path):
    source, scorer = zeroshot_scorer(hf_models["gpt2"])
    with pytest.raises(ValueError, match="has no mask token, so it cannot be scored by 'pll'"):
        scorer.check_method("pll")
    ids = torch.tensor([[0, 5, 6, 7]])
    changed = torch.tensor([[0, 5, 6, 9]])
    with torch.no_grad():
        for attention, moves in ((CAUSAL, False), (BIDIRECTIONAL, True)):  # the first state sees the last token?
            first = [source.backbone(x, attention=attention)[0, 0] for x in (ids, changed)]
            assert bool((first[0] - first[1]).abs().max() > 1e-6) == moves, attention.kind
        own = source.backbone.lm(input_ids=ids).logits
        assert torch.allclose(source.backbone.logits(source.backbone(ids, attention=CAUSAL)), own, atol=1e-5)
    with pytest.raises(ValueError, match="within documents"):
        source.backbone(ids, attention=CAUSAL.within(torch.zeros_like(ids)))
    out = tmp_path / "zs"
    with pytest.raises(ValueError, match="no mask token"):
        run_zeroshot(zeroshot_config([f"checkpoint={hf_models['gpt2']}", f"blimp.dir={blimp_dir}", "methods=[bound]",
                                      f"output_dir={out}"]))
    assert not out.exists()


def test_bad_sources_and_inputs_end_in_one_line(hf_models, blimp_dir, tmp_path):
    with pytest.raises(ValueError, match=r"hf:bert-base-cased cannot be loaded: HF_HUB_OFFLINE is set .*checkpoint=<folder>"):
        open_source("hf:bert-base-cased@main")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="neither an armlm run .* nor a Hugging Face model"):
        open_source(tmp_path / "empty")
    source = open_source(hf_models["bert"])
    with pytest.raises(ValueError, match=f"longer than the {POSITIONS} positions"):
        source.backbone(torch.full((1, POSITIONS + 1), 5), attention=BIDIRECTIONAL)
    # a tokenizer with no pre-tokenizer cannot say where a word ends: PLL-word-l2r is refused, PLL is not
    unsplit = tmp_path / "unsplit"
    shutil.copytree(hf_models["bert"], unsplit)
    spec = json.loads((unsplit / "tokenizer.json").read_text())
    spec["pre_tokenizer"] = None
    (unsplit / "tokenizer.json").write_text(json.dumps(spec))
    out = tmp_path / "zs"
    with pytest.raises(ValueError, match="no pre-tokenizer, so its tokens cannot be aligned to words"):
        run_zeroshot(zeroshot_config([f"checkpoint={unsplit}", f"blimp.dir={blimp_dir}", "methods=[pll_word_l2r]",
                                      f"output_dir={out}"]))
    assert not out.exists()
    assert zeroshot_scorer(unsplit)[1].methods == ("pll", "pll_word_l2r", "bound")  # the check is per method


@pytest.mark.slow
def test_an_armlm_checkpoint_and_its_export_give_the_same_numbers(untrained, tmp_path, blimp_dir):
    """An AR checkpoint exports as a plain GPT2LMHeadModel: read back through the Hugging Face path, every figure
    it shares with the checkpoint is the same (fp32)."""
    export_checkpoint(untrained["ar"], tmp_path / "hf", format="native")
    ours, theirs = open_source(untrained["ar"]), open_source(tmp_path / "hf")
    assert theirs.special.start == ours.special.start and theirs.special.document_end == ours.special.document_end
    common = ["bootstrap.resamples=100", f"blimp.dir={blimp_dir}"]
    scores = {name: run_zeroshot(zeroshot_config([f"checkpoint={where}", f"output_dir={tmp_path / name}", *common]))
              for name, where in (("ours", untrained["ar"]), ("theirs", tmp_path / "hf"))}
    assert scores["ours"]["blimp"]["log_prob_per_token"]["exact"] == pytest.approx(
        scores["theirs"]["blimp"]["log_prob_per_token"]["exact"], abs=1e-5)
    settings = ["pairs=3", "candidates=6", "sentences.max_tokens=20", "representations.sentences=4",
                "likelihood.blocks=2", "likelihood.block_size=32"]
    reports = {name: run_diagnostics(evaluate_config([f"checkpoint={where}", f"output_dir={tmp_path / ('ev' + name)}",
                                                      *settings]))
               for name, where in (("ours", untrained["ar"]), ("theirs", tmp_path / "hf"))}
    a, b = reports["ours"], reports["theirs"]
    assert a["sequence"]["log_likelihood"] == pytest.approx(b["sequence"]["log_likelihood"], abs=1e-4)
    assert a["likelihood"]["nll_per_token"] == pytest.approx(b["likelihood"]["nll_per_token"], abs=1e-5)
    for kind in ("contiguous", "random"):
        assert a["pairwise"][kind]["gap_mean"]["ar_exact"] == pytest.approx(
            b["pairwise"][kind]["gap_mean"]["ar_exact"], abs=1e-5)
    # the last layer is the same state; a transformers model's earlier layers come before its final norm
    assert a["representations"]["geometry"][-1] == pytest.approx(b["representations"]["geometry"][-1], abs=1e-4)



@pytest.mark.slow
def test_type_level_vectors_come_from_every_layer_of_a_wordpiece_model_and_a_byte_level_one_is_refused(hf_models,
                                                                                                     tmp_path):
    from armlm.embeddings.run import run_embeddings
    from tests.helpers.configs import hydra_config
    summary = run_embeddings(hydra_config("embeddings", tmp_path / "bert", f"checkpoint={hf_models['bert']}",
                                          "contextual.max_contexts=1", "contextual.min_count=20"))
    assert summary["source"] == "huggingface" and summary["attention"] == "bidirectional"
    assert list(summary["layers"]) == ["0", "1", "2"]  # the embeddings, then the two layers
    assert summary["vocabulary"] > 50
    with pytest.raises(ValueError, match="not a byte-level BPE's"):
        run_embeddings(hydra_config("embeddings", tmp_path / "gpt2", f"checkpoint={hf_models['gpt2']}"))
    assert not (tmp_path / "gpt2").exists()


def test_the_lm_eval_model_type_scores_a_continuation_by_the_models_own_logits(hf_models):
    from armlm.zeroshot.harness import ArmlmLM

    class Request:  # what lm-eval hands a model type: args = (context, continuation)
        def __init__(self, *args: str) -> None:
            self.args = args

    lm = ArmlmLM(str(hf_models["gpt2"]))
    (log_prob, _), = lm.loglikelihood([Request("The cat", " sat on the mat.")])
    tokenizer = AutoTokenizer.from_pretrained(hf_models["gpt2"])
    context = tokenizer("The cat")["input_ids"]
    ids = torch.tensor([tokenizer.bos_token_id, *tokenizer("The cat sat on the mat.")["input_ids"]])
    with torch.no_grad():
        log_probs = reference_model(hf_models["gpt2"], AutoModelForCausalLM)(input_ids=ids[None]).logits[0]
    log_probs = log_probs.double().log_softmax(-1)
    chain = sum(float(log_probs[t - 1, ids[t]]) for t in range(1 + len(context), len(ids)))
    assert log_prob == pytest.approx(chain, abs=TOLERANCE)
    assert ArmlmLM(str(hf_models["bert"])).method == "pll"  # an encoder's first method


def test_a_long_input_is_scored_in_passes_of_bounded_size_with_the_same_result(hf_models):
    """Every masked copy of a sentence at once is T rows of T tokens (minicons #46 runs out of memory at 512); armlm
    runs about `tokens_per_pass` tokens a pass, down to one row, and the sums do not move."""
    source = open_source(hf_models["bert"])
    long = " ".join(["the cat sat on the mat and looked at the dog"] * 4)  # 60 positions with the frame
    (sentence,) = encode_sentences(source.tokenizer, [long], source.special)
    assert len(sentence.ids) > 50
    scores = {}
    for tokens_per_pass in (len(sentence.ids), 16384):  # one row a pass, then every row in one
        from armlm.zeroshot.scoring import SentenceScorer
        scorer = SentenceScorer(source.backbone, source.reading, source.special.mask, tokens_per_pass=tokens_per_pass)
        scores[tokens_per_pass] = float(scorer.score([sentence], "pll", progress=False).log_prob[0])
    assert scores[len(sentence.ids)] == pytest.approx(scores[16384], abs=TOLERANCE)
