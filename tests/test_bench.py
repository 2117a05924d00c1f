"""The throughput benchmark runs end to end at a tiny size, and its FLOP count is the one torch counts."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode
from torch.utils.tensorboard import SummaryWriter

import bench.conll_truncation as conll_truncation
import bench.data_path as data_path
import bench.document_attention as document_attention
import bench.likelihood_table as likelihood_table
import bench.loop as loop
import bench.objective_flops as objective_flops
import bench.pll_minicons as pll_minicons
import bench.rtd_controls as rtd_controls
import bench.rtd_plateau as rtd_plateau
import bench.throughput as throughput
import bench.vocab_size as vocab_size
import bench.zeroshot_speed as zeroshot_speed
from armlm.models.backbone import ModelConfig, Transformer
from bench.flops import Shape, forward_flops_per_token
from bench.machine import require_device

pytest.importorskip("transformers", reason="the benchmark compares against Hugging Face transformers")

TINY = ["--d-model", "32", "--n-layers", "2", "--n-heads", "2", "--d-ff", "64", "--vocab-size", "300",
        "--batch-size", "4", "--seq-len", "16", "--warmup", "1", "--rounds", "2", "--steps", "1"]


@pytest.mark.slow
def test_benchmark_prints_a_table_and_a_json_line_for_every_model(capsys, tmp_path):
    throughput.main([*TINY, "--json", str(tmp_path / "runs.jsonl")])
    out = capsys.readouterr().out
    line = out.strip().splitlines()[-1]
    result = json.loads(line)
    assert json.loads((tmp_path / "runs.jsonl").read_text()) == result
    rows = {(r["model"], r["mode"]): r for r in result["rows"]}
    armlm = {f"armlm {name}" for name in throughput.objective_names()}  # every objective config, discovered
    assert {"armlm ar", "armlm mlm", "armlm masked_diffusion"} <= armlm
    assert set(rows) == {(m, s) for m in armlm | {"HF gpt2", "HF bert"} for s in ("train", "infer")}
    for (model, mode), row in rows.items():
        t = row["tokens_per_s"]
        assert 0 < t["min"] <= t["median"] <= t["max"]
        assert row["peak_share"] > 0
        assert ("ratio_vs_hf" in row) == (model in ("armlm ar", "armlm mlm"))
        assert ("ratio_vs_ar" in row) == (model in armlm - {"armlm ar"})
    assert result["matmul_peak_flops"]["median"] > 0
    assert "| armlm mlm | train |" in out


@pytest.mark.slow
def test_compiled_runs_time_hugging_face_eager_and_compiled_and_ratio_against_each(capsys):
    """Issue 83: a compiled armlm step is held against HF's models run eagerly and compiled, in the same process."""
    throughput.main([*TINY, "--objectives", "ar", "mlm", "--compile", "--compile-backend", "aot_eager"])
    out = capsys.readouterr().out
    rows = {(r["model"], r["mode"]): r for r in json.loads(out.strip().splitlines()[-1])["rows"]}
    hf = {"HF gpt2", "HF bert", "HF gpt2 compiled", "HF bert compiled"}
    assert set(rows) == {(m, s) for m in hf | {"armlm ar", "armlm mlm"} for s in ("train", "infer")}
    for model in ("armlm ar", "armlm mlm"):
        for mode in ("train", "infer"):
            assert rows[(model, mode)]["ratio_vs_hf"]["median"] > 0
            assert rows[(model, mode)]["ratio_vs_hf_compiled"]["median"] > 0
    assert not any("ratio_vs_hf" in rows[(m, s)] for m in hf for s in ("train", "infer"))
    assert "| armlm / HF compiled (min-max) |" in out


@pytest.mark.slow
def test_flop_count_matches_torch_flop_counter():
    """torch's counter sees every matmul (it does not count the CPU flash-attention kernel, so the attention
    term is left out of the comparison). armlm's MLM and masked diffusion count their own, varying rows
    (tests/test_objective_contract.py holds every objective's count against the counter)."""
    shape = Shape(d_model=32, n_layers=2, n_heads=2, d_ff=64, vocab_size=300, batch_size=4, seq_len=16)
    args = throughput.parse_args([*TINY, "--objectives", "ar", "mlm_nsp"])
    batch = torch.randint(throughput.N_SPECIAL, shape.vocab_size, (shape.batch_size, shape.seq_len))
    contestants = {c.name: c for c in throughput.armlm_contestants(args, shape, torch.device("cpu"), batch)}
    assert set(contestants) == {"armlm ar", "armlm mlm_nsp"}  # --objectives picks them; segment pairs get built
    contestants["armlm mlm_nsp"].train()
    contestants.update({c.name: c for c in throughput.hf_contestants(args, shape, torch.device("cpu"), batch)})

    def attention(causal: bool) -> float:  # QK^T and AV per token: 2 x 2 x T x d per layer, half if causal
        return 4 * shape.n_layers * shape.seq_len * shape.d_model * (0.5 if causal else 1.0)

    ar_share = (shape.seq_len - 1) / shape.seq_len  # AR scores every position but the last
    ar_formula = forward_flops_per_token(shape, causal=True, vocab_share=ar_share)
    assert contestants["armlm ar"].forward_flops_per_token == pytest.approx(ar_formula, rel=1e-12)
    for name in ("armlm ar", "HF gpt2", "HF bert"):
        with FlopCounterMode(display=False) as counter:
            contestants[name].train()
        expected = 3 * (contestants[name].forward_flops_per_token - attention(causal=name != "HF bert"))
        assert counter.get_total_flops() / shape.tokens == pytest.approx(expected, rel=1e-9), name


@pytest.mark.slow
def test_data_path_benchmark_runs_on_a_fresh_cache(capsys):
    data_path.main(["--batches", "5", "--steps", "1", "--block-size", "32", "--batch-size", "4",
                    "model=tiny", "data.tokenizer.vocab_size=500"])
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["encode_tokens_per_s"] > 0 and result["train_tokens"] > 0
    assert set(result["batches_per_s"]) == {"blocks", "segment_pairs"}
    assert set(result["steps_per_s"]) == {f"armlm {name}" for name in throughput.objective_names()}
    assert all(ratio > 0 for ratio in result["data_over_model"].values())
    assert len(result["corruption_ms"]) == 2


@pytest.mark.slow
def test_loop_benchmark_sets_a_real_run_against_the_bare_step(capsys, cache_dir):
    loop.main(["--steps", "3", "--repeats", "1", "--bare-steps", "1", "--objectives", "mlm", "--block-size", "32",
               "--batch-size", "4", "--", "model=tiny", "data.tokenizer.vocab_size=500", f"data.cache_dir={cache_dir}",
               "trainer.val_check_interval=2"])
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    (run,) = result["runs"]["mlm"]
    assert run["steps"] == 3 and run["loop"] > 0 and run["bare"] > 0
    assert run["share"] == pytest.approx(run["loop"] / run["bare"])


@pytest.mark.slow
def test_likelihood_table_puts_exact_and_bound_side_by_side(capsys, tiny_pretrained, tmp_path):
    likelihood_table.main(["--seeds", "1", "--reference", "ar", "--out", str(tmp_path),
                           "--arm", f"ar={tiny_pretrained['ar']}", "--arm", f"mlm={tiny_pretrained['mlm']}",
                           "--", "likelihood.blocks=4", "likelihood.draws=2", "likelihood.max_draws=2"])
    out = capsys.readouterr().out
    rows = {line.split(" | ")[0].strip("| "): line for line in out.splitlines() if line.startswith("| ")}
    assert " exact " in rows["ar"] and " upper_bound " in rows["mlm"]
    assert "4 held-out blocks of 32 tokens, 124 target tokens" in out
    assert (tmp_path / "mlm" / "seed1" / "diagnostics.json").is_file()


def test_conll_truncation_scores_a_perfect_tagger_under_the_cut(capsys, tmp_path):
    """At 4 positions ([CLS] two words [SEP]) the second sentence loses 'german' (B-MISC): one of its two
    entities, so the perfect tagger's recall is 2/3 over the split and its precision 1."""
    from tests.helpers.vocabularies import word_tokenizer_json

    (tmp_path / "eng.testa").write_text("-DOCSTART- -X- -X- O\n\nthe O O O\nEU B-NP B-NP B-ORG\n\n"
                                        "EU B-NP B-NP B-ORG\nrejects O O O\nGerman O O B-MISC\ncall O O O\n")
    tokenizer = tmp_path / "tokenizer.json"
    tokenizer.write_text(word_tokenizer_json("the eu rejects german call".split()))
    conll_truncation.main(["--tokenizer", str(tokenizer), "--source", str(tmp_path), "--lengths", "4", "64"])
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    short, full = result["rows"]  # no eng.testb: the test split is skipped
    assert (short["max_length"], short["sentences"], short["entities"]) == (4, 2, 3)
    assert short["cut_share"] == 0.5 and short["entities_lost_share"] == pytest.approx(1 / 3)
    assert short["perfect_recall"] == pytest.approx(2 / 3) and short["perfect_f1"] == pytest.approx(0.8)
    assert full["cut_share"] == 0 and full["entities_lost_share"] == 0 and full["perfect_f1"] == 1.0


@pytest.mark.slow
def test_zeroshot_speed_times_every_method_on_one_backbone(capsys, tiny_pretrained, tmp_path):
    rows = [{"sentence_good": f"the cat sleeps {k} .", "sentence_bad": f"the cat sleep {k} .", "field": "syntax",
             "linguistics_term": "agreement", "UID": "agr"} for k in range(6)]
    (tmp_path / "agr.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = zeroshot_speed.main(["--checkpoint", str(tiny_pretrained["mlm"]), "--blimp-dir", str(tmp_path),
                                  "--sentences", "12", "--rounds", "2"])
    out = capsys.readouterr().out
    assert result["folder_sentences"] == 12 and set(result["rows"]) == {"exact", "pll", "pll_word_l2r", "bound"}
    assert result["rows"]["exact"]["cost_over_exact"]["median"] == 1.0
    assert result["rows"]["pll"]["cost_over_exact"]["median"] > 1.0  # one pass per token against one per sentence
    assert "| pll |" in out and out.strip().splitlines()[-1].startswith("{")


BLIMP_PAIRS = [("Who should Derek hug after shocking Richard?", "Who should Derek hug Richard after shocking?"),
               ("These waitresses were complaining about themselves.",
                "These waitresses was complaining about themselves."),
               ("Many teenagers have noticed that lamp.", "Many teenagers has noticed that lamp."),
               ("The doctors who Rebecca praised fainted.", "The doctors who Rebecca praised Vanessa fainted."),
               ("Every girl hasn't hidden herself.", "Every girl hasn't hidden himself."),
               ("Kristin wasn't scaring Tamara.", "Kristin wasn't scaring.")]


@pytest.mark.slow
def test_pll_of_a_random_bert_equals_minicons_for_both_methods(capsys, tmp_path):
    pytest.importorskip("minicons", reason="minicons is not installed (pip install minicons, in the dev extra): "
                                           "the bench holds armlm's PLL to its MaskedLMScorer")
    blimp = tmp_path / "blimp"
    blimp.mkdir()
    for uid, pairs in (("agreement", BLIMP_PAIRS[:3]), ("islands", BLIMP_PAIRS[3:])):
        (blimp / f"{uid}.jsonl").write_text("".join(json.dumps({"sentence_good": g, "sentence_bad": b, "UID": uid,
                                                                "field": "syntax", "linguistics_term": uid}) + "\n"
                                                    for g, b in pairs))
    # A vocabulary of 120 on these 12 sentences splits most words, so PLL-word-l2r masks more than PLL does
    result = pll_minicons.main(["--size", "tiny", "--sentences", "12", "--rounds", "1", "--blimp-dir", str(blimp),
                                "--out", str(tmp_path / "model"), "--vocab-size", "120"])
    out = capsys.readouterr().out
    assert result["sentences"] == 12 and result["n_layers"] == 2 and result["d_model"] == 64
    for method in ("pll", "pll_word_l2r"):
        assert result["equality"][method]["max_abs_difference"] <= 1e-5, result["equality"][method]
        assert result["equality"][method]["equal"]
        assert result["rows"][method]["armlm"]["min"] > 0 and result["rows"][method]["minicons"]["min"] > 0
    # the two methods differ by far more than the tolerance, so matching minicons' l2r is not matching its PLL
    assert result["methods_apart"] > 10 * pll_minicons.TOLERANCE
    assert "| pll_word_l2r |" in out and out.strip().splitlines()[-1].startswith("{")


@pytest.mark.slow
def test_the_vocabulary_bench_counts_tokens_per_word_and_trains_a_run_per_size(capsys, monkeypatch, tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    words = "the river city was at war with the island king and his team of old sailors".split()
    for d in range(10):
        (corpus / f"{d}.txt").write_text(" ".join(words[(d * 3 + i) % len(words)] + ("s" * (i % 3)) for i in range(300)))
    data = ["data=text", f"data.corpus.paths=[{corpus}]", "data.corpus.val_fraction=0.2",
            f"data.cache_dir={tmp_path / 'cache'}", "data.block_size=32", "data.batch_size=8"]
    args = [*data, "--sizes", "60", "90", "--train-tokens", "1024", "--out", str(tmp_path / "runs"),
            "--json", str(tmp_path / "vocab.json"), "--train-overrides", "model=tiny",
            "trainer.precision=32-true", "trainer.val_check_interval=2", "logger=[]"]
    vocab_size.main(args)
    results = json.loads((tmp_path / "vocab.json").read_text())
    assert [r["vocab_size"] <= s for r, s in zip(results, (60, 90), strict=True)] == [True, True]
    train_words = 8 * 300  # 8 of the 10 documents are in the train split
    for r in results:
        assert r["words"]["train"] == train_words and r["tokens_per_word"]["train"] == r["tokens"]["train"] / train_words
        assert r["run"]["tokens_seen"] == 1024 and r["run"]["words_seen"] > 0
    assert results[1]["tokens"]["train"] < results[0]["tokens"]["train"]  # a larger vocabulary, fewer tokens
    assert "| vocabulary | tokens seen |" in capsys.readouterr().out
    # Run again after an interruption: the finished sizes are reported from their folders (the overrides Hydra kept
    # there read as the bench's own), not trained again. Each size's measurement is the first run's, as its measuring
    # process would give it from the cache now built, without starting that process.
    measured = {size: {k: v for k, v in r.items() if k != "run"} for size, r in zip((60, 90), results, strict=True)}
    monkeypatch.setattr(vocab_size, "measure", lambda overrides, size: {**measured[size], "build_seconds": None})
    monkeypatch.setattr(vocab_size.subprocess, "run", _refuse_training(vocab_size.subprocess.run))
    vocab_size.main(args)
    assert "| cached |" in capsys.readouterr().out  # a cache found built is said to be, not timed
    assert [r["run"] for r in json.loads((tmp_path / "vocab.json").read_text())] == [r["run"] for r in results]



def test_the_vocabulary_bench_reads_resumes_or_replaces_what_a_size_folder_holds(monkeypatch, tmp_path):
    """train.py keeps a run folder's last.ckpt (a fresh run there is refused), so the bench says which run a size's
    folder holds: its own finished run is read, its own interrupted one resumed (ckpt_path=last), and a run of
    other settings removed before the size trains afresh."""
    commands = []

    def train_py(command, **kwargs):  # what train.py leaves in its run folder
        commands.append([str(c) for c in command])
        folder = Path(next(c for c in commands[-1] if c.startswith("hydra.run.dir=")).split("=", 1)[1])
        (folder / ".hydra").mkdir(parents=True, exist_ok=True)
        overrides = [c for c in commands[-1][2:] if not c.startswith("hydra.run.dir=")]
        (folder / ".hydra" / "overrides.yaml").write_text(json.dumps(overrides))
        (folder / "summary.json").write_text(json.dumps(
            {"wall_seconds": 1, "tokens_seen": 64, "words_seen": 50, "val_loss": 5.0, "own_below_unigram": {"all": 1}}))
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(vocab_size.subprocess, "run", train_py)
    folder = tmp_path / "vocab60"
    vocab_size.train(["data=text"], 60, 64, ["model=tiny"], tmp_path)
    assert len(commands) == 1 and not any(c.startswith("ckpt_path=") for c in commands[0])
    vocab_size.train(["data=text"], 60, 64, ["model=tiny"], tmp_path)
    assert len(commands) == 1  # finished with these settings: read
    (folder / "summary.json").unlink()  # interrupted after a checkpoint
    (folder / "checkpoints").mkdir()
    (folder / "checkpoints" / "last.ckpt").write_bytes(b"")
    vocab_size.train(["data=text"], 60, 64, ["model=tiny"], tmp_path)
    assert commands[-1][-1] == "ckpt_path=last" and (folder / "checkpoints" / "last.ckpt").is_file()
    vocab_size.train(["data=text"], 60, 64, ["model=tiny"], tmp_path)
    assert len(commands) == 2  # the resumed run finished: its ckpt_path=last is not a setting of its own
    vocab_size.train(["data=text"], 60, 64, ["model=small"], tmp_path)  # other settings: replaced
    assert "model=small" in commands[-1] and commands[-1][-1].startswith("hydra.run.dir=")
    assert not (folder / "checkpoints").exists()


def test_a_benchmark_given_a_device_this_machine_lacks_stops_in_one_line(monkeypatch):
    """--device cuda on a laptop was torch's "not compiled with CUDA" traceback (throughput, step_profile), every
    variant or process failing alone (gpu_learns, launch_bound): one line naming the fix, a GPU's index included."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert require_device("cpu", "unused") == torch.device("cpu")
    with pytest.raises(SystemExit, match=r"^--device cuda:0: torch .* sees no cuda device on this machine; give "
                                         r"--device cpu$"):
        throughput.main(["--device", "cuda:0"])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert require_device("cuda", "unused") == torch.device("cuda")
    with pytest.raises(SystemExit, match="^--device cuda:1: torch .* sees 1 cuda device on this machine; fix$"):
        require_device("cuda:1", "fix")

def _refuse_training(run):
    def checked(command, **kwargs):
        assert "train.py" not in " ".join(map(str, command)), "a finished size was trained again"
        return run(command, **kwargs)
    return checked


@pytest.mark.slow
def test_objective_flops_prints_each_objectives_cost_against_mlm(capsys):
    objective_flops.main(["--objectives", "mlm", "electra", "--model", "tiny", "--vocab", "300", "--block", "16",
                          "--batch", "4", "--draws", "2", "--tokens", "640"])
    rows = {line.split("|")[1].strip(): line.split("|") for line in capsys.readouterr().out.splitlines()
            if line.startswith("| mlm") or line.startswith("| electra")}
    assert float(rows["mlm"][5]) == 1.0 and float(rows["electra"][5]) > 1.0  # the generator costs something


@pytest.mark.slow
def test_document_attention_times_both_paths_for_each_objective(capsys):
    document_attention.main(["--objectives", "ar", "mlm", "--model", "tiny", "--vocab", "300", "--block", "16",
                             "--batch", "4", "--rounds", "2", "--steps", "1", "--document-tokens", "6"])
    out = capsys.readouterr().out
    rows = [line.split("|") for line in out.splitlines() if line.startswith("| ar") or line.startswith("| mlm")]
    assert len(rows) == 2 and all(float(r[2]) > 0 and float(r[3]) > 0 for r in rows)
    assert "of blocks hold a boundary" in out


@pytest.mark.slow
def test_rtd_plateau_reports_when_each_objective_leaves_its_baseline(capsys):
    """On the counting corpus a masked LM halves its loss within a few hundred steps; the row says so by step."""
    rtd_plateau.main(["--seeds", "1", "--steps", "400", "--fraction", "0.7"])
    rows = [line.split("|") for line in capsys.readouterr().out.splitlines() if line.startswith("| 1 ")]
    assert len(rows) == 1
    mlm_step, mlm_ratio = rows[0][2].split()
    assert int(mlm_step) <= 400 and float(mlm_ratio.strip("()")) <= 0.7
    rtd_step, rtd_ratio = rows[0][3].split()  # its last moving mean when it never leaves: near 1 on the plateau
    assert rtd_step == "never" or int(rtd_step) <= 400
    assert rtd_step != "never" or float(rtd_ratio.strip("()")) > 0.7


def test_the_unigram_control_replaces_only_selected_positions_with_unigram_samples(vocab):
    """The control's detector learns from unigram noise at BERT's positions; its generator is never trained."""
    shape = dict(d_model=64, n_layers=2, max_len=64, positions="learned", norm_position="pre", dropout=0.0,
                 layer_norm_eps=1e-5, init_std=0.02)
    objective = rtd_controls.UnigramGeneratorElectra(**shape)
    objective.set_vocabulary(vocab)
    model = Transformer(ModelConfig(vocab_size=vocab.size, d_model=64, n_layers=2, n_heads=2, d_ff=128, max_len=64,
                                    dropout=0.0))
    ids = torch.randint(6, vocab.size, (8, 32), generator=torch.Generator().manual_seed(0))
    batch = {"input_ids": ids}
    corrupted = objective.replace(batch, model, torch.Generator().manual_seed(1))
    assert corrupted.selected.any() and torch.equal(corrupted.replaced, corrupted.inputs != ids)
    assert torch.equal(corrupted.inputs[~corrupted.selected], ids[~corrupted.selected])
    never = torch.as_tensor(vocab.unigram_counts) == 0  # a token the corpus never has is never drawn
    assert not never[corrupted.inputs[corrupted.selected]].any()
    out = objective.loss(batch, model, torch.Generator().manual_seed(1))
    out.loss.backward()
    assert model.token_embedding.weight.grad.abs().sum() > 0  # the detector's loss trains the backbone
    assert all(p.grad is None for p in objective.generator.blocks.parameters())  # the generator is unused


def test_the_trained_generator_control_trains_the_generator_and_discards_its_samples(vocab):
    """With train_generator=True the generator's loss and gradient are ELECTRA's (same selection, same loss as the
    objective's own replace under the same random stream), while the inputs at the selected positions are unigram
    draws: tokens the corpus never has, which a generator may sample, never appear."""
    shape = dict(d_model=64, n_layers=2, max_len=64, positions="learned", norm_position="pre", dropout=0.0,
                 layer_norm_eps=1e-5, init_std=0.02)
    torch.manual_seed(0)
    objective = rtd_controls.UnigramGeneratorElectra(train_generator=True, **shape)
    objective.set_vocabulary(vocab)
    model = Transformer(ModelConfig(vocab_size=vocab.size, d_model=64, n_layers=2, n_heads=2, d_ff=128, max_len=64,
                                    dropout=0.0))
    # 32 x 32 positions: about 150 selected, so the untrained generator's near-uniform samples hit the two
    # never-seen ids with probability 1 - 0.96^150
    ids = torch.randint(6, vocab.size, (32, 32), generator=torch.Generator().manual_seed(0))
    batch = {"input_ids": ids}
    learned = rtd_controls.Electra.replace(objective, batch, model, torch.Generator().manual_seed(1))
    corrupted = objective.replace(batch, model, torch.Generator().manual_seed(1))
    assert torch.equal(corrupted.selected, learned.selected)
    assert torch.allclose(corrupted.generator_loss, learned.generator_loss) and corrupted.generator_loss > 0
    assert corrupted.forward_flops == learned.forward_flops > 0  # the generator's FLOPs are counted: it runs
    assert torch.equal(corrupted.replaced, corrupted.inputs != ids)
    assert torch.equal(corrupted.inputs[~corrupted.selected], ids[~corrupted.selected])
    never = torch.as_tensor(vocab.unigram_counts) == 0
    assert never[learned.inputs[learned.selected]].any()  # the untrained generator does sample them
    assert not never[corrupted.inputs[corrupted.selected]].any()  # the control's replacements never do
    out = objective.loss(batch, model, torch.Generator().manual_seed(1))
    out.loss.backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in objective.generator.blocks.parameters())


def test_the_controls_read_the_share_below_the_prior_at_the_steps_both_were_logged(tmp_path):
    writer = SummaryWriter(str(tmp_path / "tensorboard"))  # where train.py logs
    for step, (loss, prior) in {100: (0.60, 0.64), 200: (0.48, 0.64), 300: (None, 0.64)}.items():
        writer.add_scalar("val/own_unigram", prior, step)
        if loss is not None:
            writer.add_scalar("val/rtd_loss", loss, step)
    writer.add_scalar("val/rtd_loss", 0.5, 400)  # no prior logged at this step: no share
    writer.close()
    shares = rtd_controls.share_below(tmp_path, "val/rtd_loss", "val/own_unigram")
    assert shares.keys() == {100, 200}
    assert shares[100] == pytest.approx((0.64 - 0.60) / 0.64) and shares[200] == pytest.approx(0.25)


@pytest.mark.slow
def test_the_candidates_bench_tabulates_each_candidate_count_against_the_largest(tiny_pretrained, capsys, monkeypatch):
    """It read Setup.pretrained, which Setup no longer has, and checked the likelihood's blocks it does not score."""
    import bench.diagnostics_candidates as candidates

    monkeypatch.setattr("sys.argv", ["diagnostics_candidates.py", str(tiny_pretrained["ar"]), "--ks", "2", "4",
                                     "--pairs", "2", "--no-exact", "--", "kinds=[contiguous]"])
    candidates.main()
    out = capsys.readouterr().out
    figures = json.loads(out.strip().splitlines()[-1])
    assert list(figures) == ["contiguous"] and list(figures["contiguous"]) == ["2", "4"]
    assert "| construction | metric | K=2 | K=4 | max rel. error at K |" in out
