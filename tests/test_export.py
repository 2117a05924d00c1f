"""Export to Hugging Face transformers (interchange/): every objective and both position kinds load with the Auto
classes and give armlm's logits (max |delta| < 1e-4, fp32) on real sentences, with and without padding; the
tokenizer gives armlm's ids; fill-mask and generate() agree with armlm; what cannot be exported says why
(fine-tuned heads: test_export_finetuned.py)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from tokenizers import Tokenizer
from transformers import AutoModelForCausalLM, AutoModelForMaskedLM, AutoTokenizer

from armlm.common.config import CONFIGS
from armlm.common.vocabulary import CLS, MASK
from armlm.interchange import modeling_armlm
from armlm.interchange.export import export_checkpoint, run_export
from armlm.interchange.gpt2 import AUTO_FOLD_GROWTH, fold_growth
from armlm.interchange.parity import PARITY_TOLERANCE, armlm_backbone, fill_mask_agreement, generate_agreement
from armlm.interchange.source import read_source
from armlm.models.attention import BIDIRECTIONAL
from armlm.objectives.base import NOT_A_LANGUAGE_MODEL
from armlm.training.pretrained import load_pretrained
from tests.helpers.checkpoints import pretraining_checkpoint
from tests.helpers.configs import REPO
from tests.helpers.lanes import fast_lane_keeps

OBJECTIVES = sorted(path.stem for path in (REPO / "configs" / "objective").glob("*.yaml"))
POSITIONS = ("learned", "rope")


@pytest.mark.parametrize("objective,positions", fast_lane_keeps(
    [(objective, positions) for objective in OBJECTIVES for positions in POSITIONS],
    keep=[("ar", "rope"), ("mlm", "learned"), ("electra", "rope")]))
def test_every_objective_exports_with_armlm_logits(objective, positions, tmp_path, tokenizer_json, sentences):
    ckpt = pretraining_checkpoint(tmp_path / "run", tokenizer_json, objective, f"model.positions={positions}")
    if load_pretrained(ckpt).objective_class.scoring == NOT_A_LANGUAGE_MODEL:  # a discriminator: refused, unwritten
        with pytest.raises(ValueError, match="not a language model"):
            export_checkpoint(tmp_path / "run", tmp_path / "hf")
        assert not (tmp_path / "hf").exists()
        return
    result = export_checkpoint(tmp_path / "run", tmp_path / "hf")
    model, cls, _ = armlm_backbone(ckpt)
    causal = cls.scoring == "chain_rule"
    # GPT-2 takes the causal, learned-position, pre-LN readers whose bias folds well; the rest ship armlm's file.
    maps = causal and positions == "learned" and cls.left_to_right_reader == "causal" and cls.mask_in_support
    source = read_source(ckpt)
    assert result.native == (maps and fold_growth(source.weights, source.lm_bias) <= AUTO_FOLD_GROWTH)
    assert result.parity.max_abs_logit_diff < PARITY_TOLERANCE and result.ids_equal

    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "hf", trust_remote_code=not result.native)
    auto = AutoModelForCausalLM if causal else AutoModelForMaskedLM
    hf = auto.from_pretrained(tmp_path / "hf", trust_remote_code=not result.native).eval()
    raw = Tokenizer.from_str(tokenizer_json)
    mask_id = raw.token_to_id(MASK)
    for batch_texts in (sentences[:1], sentences):  # one sentence (no padding), then a padded batch
        batch = tokenizer(batch_texts, padding=True, return_tensors="pt")
        for row, text in enumerate(batch_texts):
            ids = [raw.token_to_id(CLS), *raw.encode(text, add_special_tokens=False).ids]
            assert batch["input_ids"][row, :len(ids)].tolist() == ids
        with torch.no_grad():
            theirs = hf(**batch).logits
            if causal:
                ours = model.logits(cls.next_token_states(model, batch["input_ids"], mask_id))
            else:
                ours = model.logits(model(batch["input_ids"], attention=BIDIRECTIONAL,
                                          attention_mask=batch["attention_mask"]))
        real = batch["attention_mask"].bool()
        supported = torch.ones(ours.shape[-1], dtype=torch.bool)
        if not cls.mask_in_support:
            supported[mask_id] = False
            assert bool((theirs[..., mask_id] <= torch.finfo(theirs.dtype).min).all())
        assert (ours - theirs)[real][:, supported].abs().max() < PARITY_TOLERANCE


def test_plain_gpt2_folder_needs_no_remote_code(tmp_path, tokenizer_json):
    pretraining_checkpoint(tmp_path / "run", tokenizer_json, "ar")
    (tmp_path / "run" / ".hydra").mkdir()
    (tmp_path / "run" / ".hydra" / "config.yaml").write_text(
        "data:\n  corpus: {name: brown}\n  tokenizer: {kind: wordpiece, vocab_size: 700}\nmax_tokens: 2200000\n"
        "max_flops: null\ndata_epochs: null\nseed: 7\n")
    (tmp_path / "run" / "summary.json").write_text(json.dumps({"tokens_seen": 2200064, "val_loss": 3.92,
                                                               "val_loss_kind": "next_token"}))
    export_checkpoint(tmp_path / "run", tmp_path / "hf", format="native")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["architectures"] == ["GPT2LMHeadModel"] and "auto_map" not in config
    assert not (tmp_path / "hf" / "modeling_armlm.py").exists()
    assert {p.name for p in (tmp_path / "hf").iterdir()} >= {"model.safetensors", "tokenizer.json", "README.md",
                                                             "generation_config.json"}
    card = (tmp_path / "hf" / "README.md").read_text()
    for fact in ("AutoregressiveLM", "Radford", "abc123", "GPT2LMHeadModel", '"brown"', "max_tokens=2200000",
                 "seed=7", "2200064", "val_loss=3.92", "max abs logit diff"):
        assert fact in card, fact


def test_auto_takes_gpt2_only_while_the_bias_fold_keeps_half_precision(tmp_path, tokenizer_json):
    """A small LM-head bias folds into GPT-2's head with little growth: auto exports GPT-2. A large one would
    multiply bf16 rounding: auto ships armlm's file and says why; format=native still takes GPT-2, exact in fp32,
    and its card gives the growth."""
    ckpt = pretraining_checkpoint(tmp_path / "run", tokenizer_json, "ar")
    state = torch.load(ckpt, weights_only=True)
    state["state_dict"]["model.lm_bias"] *= 0.01
    torch.save(state, tmp_path / "small-bias.ckpt")
    small = export_checkpoint(tmp_path / "small-bias.ckpt", tmp_path / "small")
    assert small.native and small.fold_growth <= AUTO_FOLD_GROWTH
    large = export_checkpoint(ckpt, tmp_path / "large")
    assert not large.native and "bf16" in large.not_native[0]
    forced = export_checkpoint(ckpt, tmp_path / "forced", format="native")
    assert forced.native and forced.fold_growth > AUTO_FOLD_GROWTH
    assert forced.parity.max_abs_logit_diff < PARITY_TOLERANCE
    assert f"about {forced.fold_growth:.1f}" in (tmp_path / "forced" / "README.md").read_text()


def test_the_same_checkpoint_exports_as_remote_code_too(tmp_path, tokenizer_json):
    pretraining_checkpoint(tmp_path / "run", tokenizer_json, "ar")
    result = export_checkpoint(tmp_path / "run", tmp_path / "hf", format="remote")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert not result.native and config["architectures"] == ["ArmlmForCausalLM"]
    assert set(config["auto_map"]) == {"AutoConfig", "AutoModel", "AutoModelForCausalLM", "AutoModelForMaskedLM",
                                       "AutoModelForSequenceClassification", "AutoModelForTokenClassification"}
    assert result.parity.max_abs_logit_diff < PARITY_TOLERANCE


@pytest.mark.parametrize("overrides", [("model.norm_position=post",), ("model.norm_position=post", "model.positions=rope")])
def test_post_ln_backbones_export(overrides, tmp_path, tokenizer_json):
    pretraining_checkpoint(tmp_path / "run", tokenizer_json, "mlm", *overrides)
    result = export_checkpoint(tmp_path / "run", tmp_path / "hf")
    assert result.parity.max_abs_logit_diff < PARITY_TOLERANCE and not result.native


def test_what_cannot_be_exported_says_why(tmp_path, tokenizer_json):
    pretraining_checkpoint(tmp_path / "rope", tokenizer_json, "ar", "model.positions=rope")
    with pytest.raises(ValueError, match="model.positions=rope.*format=remote"):
        export_checkpoint(tmp_path / "rope", tmp_path / "hf", format="native")
    pretraining_checkpoint(tmp_path / "mlm", tokenizer_json, "mlm")
    with pytest.raises(ValueError, match="ArmlmForMaskedLM"):
        export_checkpoint(tmp_path / "mlm", tmp_path / "hf", format="native")
    with pytest.raises(ValueError, match="format='onnx'"):
        export_checkpoint(tmp_path / "mlm", tmp_path / "hf", format="onnx")
    assert not (tmp_path / "hf").exists()  # nothing half-written
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="overwrite=true"):
        export_checkpoint(tmp_path / "mlm", tmp_path / "taken")
    assert (tmp_path / "taken" / "keep.txt").read_text() == "mine"
    with pytest.raises(FileExistsError, match="not an earlier export"):  # overwrite replaces exports only
        export_checkpoint(tmp_path / "mlm", tmp_path / "taken", overwrite=True)
    with pytest.raises(ValueError, match="holds the checkpoint"):  # never the run folder itself
        export_checkpoint(tmp_path / "mlm", tmp_path / "mlm", overwrite=True)
    export_checkpoint(tmp_path / "mlm", tmp_path / "hf")
    before = (tmp_path / "hf" / "model.safetensors").read_bytes()
    with pytest.raises(ValueError, match="model.positions=rope"):  # a failed overwrite keeps the earlier export
        export_checkpoint(tmp_path / "rope", tmp_path / "hf", format="native", overwrite=True)
    assert (tmp_path / "hf" / "model.safetensors").read_bytes() == before
    export_checkpoint(tmp_path / "rope", tmp_path / "hf", overwrite=True)
    assert (tmp_path / "hf" / "model.safetensors").read_bytes() != before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no staging folder left


@pytest.mark.parametrize("setting", ["overwrite=yes", "milestones=maybe"])
def test_a_flag_that_is_not_true_or_false_is_refused_before_anything_is_written(tmp_path, setting):
    """overwrite=yes was true to Python, and `armlm export` wrote over the export already in out=."""
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "keep.txt").write_text("an earlier export")
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        cfg = compose("export", [f"checkpoint={tmp_path / 'nowhere'}", f"out={tmp_path / 'hf'}", setting])
    key, value = setting.split("=")
    with pytest.raises(ValueError, match=rf"^{key}='{value}': expected true or false"):
        run_export(cfg)
    assert [p.name for p in (tmp_path / "hf").iterdir()] == ["keep.txt"]


def test_modeling_file_does_not_import_armlm():
    tree = ast.parse(Path(modeling_armlm.__file__).read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert imported <= {"__future__", "torch", "transformers"}, imported


@pytest.mark.slow
def test_fill_mask_and_generate_agree_with_armlm(tmp_path, tiny_pretrained, sentences):
    """On trained checkpoints: the fill-mask pipeline's top tokens are armlm's, and greedy generate() (the folder's
    defaults) continues each prompt as armlm's greedy sampler does with `armlm generate`'s bans, alone and batched."""
    export_checkpoint(tiny_pretrained["mlm"], tmp_path / "mlm")
    assert fill_mask_agreement(tiny_pretrained["mlm"], tmp_path / "mlm", sentences[:3]) == 3
    prompts = ["The river", sentences[0][:30], sentences[1]]
    for form in ("native", "remote"):  # GPT-2 with its key-value cache, and armlm's file without one
        result = export_checkpoint(tiny_pretrained["ar"], tmp_path / form, format=form)
        assert result.native == (form == "native")
        assert generate_agreement(tiny_pretrained["ar"], tmp_path / form, prompts) == len(prompts)
        # Batched prompts need left padding; each row continues as it does alone.
        hf = AutoModelForCausalLM.from_pretrained(tmp_path / form, trust_remote_code=True).eval()
        tokenizer = AutoTokenizer.from_pretrained(tmp_path / form, trust_remote_code=True, padding_side="left")
        alone = [hf.generate(**tokenizer(p, return_tensors="pt"), max_new_tokens=12)[0].tolist() for p in prompts]
        batch = tokenizer(prompts, padding=True, return_tensors="pt")
        rows = hf.generate(**batch, max_new_tokens=12)
        for row, mask, single in zip(rows.tolist(), batch["attention_mask"].tolist(), alone):
            pads = mask.count(0)
            assert row[pads:pads + len(single)] == single


@pytest.mark.slow
def test_export_command(tmp_path, tiny_pretrained):
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base="1.3"):
        cfg = compose("export", overrides=[f"checkpoint={tiny_pretrained['mlm']}", f"out={tmp_path / 'mlm'}"])
    result = run_export(cfg)
    assert result.out == tmp_path / "mlm" and result.target == "ArmlmForMaskedLM" and not result.native
    assert "MaskedLM" in (tmp_path / "mlm" / "README.md").read_text()
    done = subprocess.run([sys.executable, "-m", "armlm", "export", f"checkpoint={tiny_pretrained['mlm']}",
                           f"out={tmp_path / 'mlm'}"], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 1 and "overwrite=true" in done.stderr + done.stdout
    # the refused command's log lands in its working folder (Hydra's outputs/), never in the checkout
    assert list((tmp_path / "outputs" / "export").glob("*/commands.log"))


@pytest.mark.slow
def test_clients_read_an_export_right_by_default(tmp_path, tiny_pretrained):
    """What a new user's default calls get: the window of the trained positions, a tokenizer class transformers 4
    loads too, readable pipeline text with the prompt and its continuation apart, and a refusal, naming the fix,
    where a caller adds its own [CLS] before the tokenizer's."""
    from transformers import pipeline

    for form in ("native", "remote"):
        export_checkpoint(tiny_pretrained["ar"], tmp_path / form, format=form)
        config = json.loads((tmp_path / form / "config.json").read_text())
        assert config.get("n_positions", config.get("max_len")) == 32  # trained on 32, not the table's 512
        assert json.loads((tmp_path / form / "tokenizer_config.json").read_text())["tokenizer_class"] == \
            "PreTrainedTokenizerFast"
        tokenizer = AutoTokenizer.from_pretrained(tmp_path / form)
        text = "the band's city, isn't it?"
        assert tokenizer.decode(tokenizer(text)["input_ids"], skip_special_tokens=True).strip() == text
        generator = pipeline("text-generation", model=str(tmp_path / form), trust_remote_code=True, device="cpu")
        (out,) = generator("the city of", max_new_tokens=6, do_sample=False)
        hf = AutoModelForCausalLM.from_pretrained(tmp_path / form, trust_remote_code=True).eval()
        prompt = tokenizer("the city of", return_tensors="pt")
        ids = hf.generate(**prompt, max_new_tokens=6)[0]
        new = tokenizer.decode(ids[prompt["input_ids"].shape[1]:], skip_special_tokens=True)
        assert out["generated_text"] == "the city of" + new
        # a continuation that begins with a word decodes with the space before it, so appending it reads right
        assert tokenizer.decode(tokenizer("the capital", add_special_tokens=False)["input_ids"]) == " the capital"
    doubled = torch.tensor([[tokenizer.cls_token_id, *tokenizer("the city")["input_ids"]]])
    with pytest.raises(ValueError, match=r"starts with \[CLS\] \[CLS\].*add_bos_token=False"):
        hf(input_ids=doubled)
