"""The objective contract, checked for every config in configs/objective/ (discovered, never listed): adding an
objective is one file + one YAML, and this test covers it with no edit.

Per objective: it builds from its config, its loss on a batch of its own input format is finite and its
gradients reach the backbone, and the FLOPs it reports are those torch's flop counter sees; it trains end to end, its
checkpoint loads with weights_only=True, a run resumed part-way ends with the same weights as the uninterrupted one;
the checkpoint fine-tunes on a tiny NER task and runs the independence and representation diagnostics; and a
checkpoint of it (untrained: what reads one does not care) is scored zero-shot by every method its class names,
directly and through lm-evaluation-harness."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path

import pytest
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from armlm.diagnostics.methods import scoring_method
from armlm.diagnostics.run import evaluate_config, run_diagnostics
from armlm.finetune.run import run_finetune
from armlm.generation.decode import generator_for
from armlm.interchange.source import read_source
from armlm.models.attention import KINDS, Attention
from armlm.models.backbone import Transformer
from armlm.objectives.base import NOT_A_LANGUAGE_MODEL, LossOutput, Objective
from armlm.objectives.composite import Composite
from armlm.training.pretrained import load_pretrained
from armlm.training.run import run_pretraining
from armlm.training.setup import build, build_model_config
from armlm.zeroshot.run import run_zeroshot, zeroshot_config
from armlm.zeroshot.scoring import available_methods
from tests.helpers.configs import REPO, finetune_config, tiny_config
from tests.helpers.objectives import skipped_causal_half
from tests.helpers.runs import PretrainedRuns
from tests.helpers.tensorboard_tags import COMMON_TAGS, scalar_tags


def is_language_model(cls: type[Objective]) -> bool:
    return cls.scoring != NOT_A_LANGUAGE_MODEL


OBJECTIVES = sorted(path.stem for path in (REPO / "configs" / "objective").glob("*.yaml"))
STEPS, HALF = 8, 4  # tiny_config: batch 8 x 32-token blocks


def test_every_objective_config_is_discovered():
    assert len(OBJECTIVES) >= 3 and {"ar", "mlm"} <= set(OBJECTIVES)


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> Mapping[str, Path]:
    """One tiny pretraining run per objective, with a resumable checkpoint written half-way; each built once per
    test run, by the first worker that needs it."""
    return PretrainedRuns(tmp_path_factory, cache_dir, "contract", {
        name: (f"objective={name}", f"trainer.max_steps={STEPS}", f"save_at_tokens=[{HALF * 8 * 32}]")
        for name in OBJECTIVES})


@pytest.mark.slow
@pytest.mark.parametrize("name", OBJECTIVES)
def test_loss_is_finite_and_reaches_the_backbone(name, tmp_path, cache_dir):
    cfg = tiny_config(tmp_path, cache_dir, f"objective={name}")
    objective = instantiate(cfg.objective)
    assert isinstance(objective, Objective)
    # fine-tuning and diagnostics ask the class, never an instance: the class a checkpoint of this config answers as
    cls = type(objective).downstream(OmegaConf.to_container(cfg.objective, resolve=True))
    # val_loss_kind names what val/loss averages; reports keep each kind in its own column
    assert cls.val_loss_kind.isidentifier() and cls.pretraining_attention in KINDS
    assert set(cls.perplexity_of) <= set(cls.extra_metrics)
    assert cls.likelihood_metric in (None, "loss", *cls.extra_metrics)  # a metric it logs
    Attention.named(cls.finetune_attention)  # a pattern fine-tuning and diagnostics can run
    if is_language_model(cls):
        scoring_method(cls)  # a scoring method the diagnostics implement
    else:  # a discriminator: the diagnostics refuse it by name, never score it as something it is not
        with pytest.raises(ValueError, match="not a language model"):
            scoring_method(cls)
    datamodule = instantiate(cfg.data, input_format=objective.input_format, seed=cfg.seed)
    datamodule.setup("fit")
    objective.set_vocabulary(datamodule.vocabulary)
    config = build_model_config(cfg.model)
    config.vocab_size = datamodule.vocabulary.size
    model = Transformer(config)
    batch = next(iter(datamodule.train_dataloader()))
    seen: list[tuple[Attention, torch.Size]] = []  # each backbone call's attention and its input's shape
    forward = model.forward
    model.forward = lambda ids, **kwargs: seen.append((kwargs["attention"], ids.shape)) or forward(ids, **kwargs)
    out = objective.loss(batch, model, torch.Generator().manual_seed(0))
    # it attends as it declares: one pass, or one per component of a mixture, the first the declared kind
    assert seen[0][0].kind == objective.pretraining_attention and {a.kind for a, _ in seen} <= set(KINDS)
    assert isinstance(out, LossOutput) and torch.isfinite(out.loss)
    assert 0 < int(out.predicted_tokens) <= int(out.input_tokens) <= batch["input_ids"].numel()
    assert set(out.extras) == set(objective.extra_metrics)
    # The FLOPs it reports (budgets, train/flops_seen) are the matmuls it runs, heads included
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        reported = objective.loss(batch, model, torch.Generator().manual_seed(0)).forward_flops
    skipped = 0
    for attention, shape in seen[len(seen) // 2:]:  # the second loss call's passes
        inputs = batch["input_ids"].new_zeros(shape)  # what the backbone ran on
        mask = batch.get("attention_mask") if shape[0] == batch["input_ids"].shape[0] else None
        skipped += skipped_causal_half(config, inputs, attention, mask)
    assert counter.get_total_flops() == pytest.approx(reported + skipped, rel=1e-12)
    out.loss.backward()
    grads = [p.grad for p in model.blocks.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads) and any(g.abs().sum() > 0 for g in grads)


@pytest.mark.slow
@pytest.mark.parametrize("name", OBJECTIVES)
def test_documents_do_not_see_each_other_when_asked(name, tmp_path, cache_dir):
    """data.cross_document_attention=false reaches every objective's attention (tests/test_document_attention.py
    holds the backbone against a per-document loop): the loss changes, and the FLOPs count what runs."""
    cfg = tiny_config(tmp_path, cache_dir, f"objective={name}", "data.cross_document_attention=false")
    objective = instantiate(cfg.objective)
    if objective.input_format != "blocks":  # segment pairs join two documents on purpose
        with pytest.raises(ValueError, match="cross_document_attention"):
            build(cfg.data, input_format=objective.input_format, seed=cfg.seed)  # as train.py builds it
        return
    datamodule = instantiate(cfg.data, input_format=objective.input_format, seed=cfg.seed)
    datamodule.setup("fit")
    objective.set_vocabulary(datamodule.vocabulary)
    config = build_model_config(cfg.model)
    config.vocab_size = datamodule.vocabulary.size
    torch.manual_seed(0)
    model = Transformer(config)
    # a batch in which some block holds several documents (the embedded corpus' documents are long)
    batch = next(b for b in datamodule.train_dataloader() if int(b["document_ids"].max()) > 0)
    seen: list[Attention] = []  # each backbone call's attention
    forward = model.forward
    model.forward = lambda ids, **kwargs: seen.append(kwargs["attention"]) or forward(ids, **kwargs)
    objective.loss(batch, model, torch.Generator().manual_seed(0))
    assert seen and all(attention.documents is not None for attention in seen)  # every pass stays within documents
    model.forward = forward
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        reported = objective.loss(batch, model, torch.Generator().manual_seed(0)).forward_flops
    assert counter.get_total_flops() == pytest.approx(reported, rel=1e-12)  # dense masks: nothing skipped


@pytest.mark.slow
@pytest.mark.parametrize("name", OBJECTIVES)
def test_trains_checkpoints_and_resumes_exactly(name, runs, tmp_path, cache_dir):
    folder = runs[name]
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["steps"] == STEPS and summary["tokens_seen"] == STEPS * 8 * 32  # every block fills 32 positions
    assert 0 < summary["pred_tokens_seen"] <= summary["tokens_seen"] and math.isfinite(summary["val_loss"])
    assert Path(summary["best_checkpoint"]).is_file() and Path(summary["last_checkpoint"]).is_file()
    assert summary["val_ppl"] == pytest.approx(math.exp(summary["val_loss"]), rel=1e-5)
    objective = instantiate(tiny_config(tmp_path, cache_dir, f"objective={name}").objective)
    assert summary["val_loss_kind"] == objective.val_loss_kind
    # every position but a block's last predicts the next token (an MLM -> AR curriculum's first phase does not)
    if objective.val_loss_kind == "next_token" and not isinstance(objective, Composite):
        assert summary["pred_tokens_seen"] == STEPS * 8 * 31
    # the same tags for every objective, plus each objective's own metrics
    assert COMMON_TAGS | {f"val/{m}" for m in objective.extra_metrics} <= scalar_tags(folder)
    assert {f"val/{p}" for p in objective.perplexity_of.values()} <= scalar_tags(folder)
    if objective.likelihood_metric is not None:  # the summary keeps the comparable NLL per target token
        assert summary["val_likelihood"] == pytest.approx(summary["metrics"][f"val/{objective.likelihood_metric}"])
    else:
        assert summary["val_likelihood"] is None
    last = torch.load(folder / "checkpoints" / "last.ckpt", weights_only=True)
    assert last["hyper_parameters"]["objective"]["_target_"].startswith("armlm.objectives.")
    part_way = folder / "checkpoints" / f"tokens-{HALF * 8 * 32}.ckpt"
    resumed = run_pretraining(tiny_config(tmp_path, cache_dir, f"objective={name}", f"trainer.max_steps={STEPS}",
                                    f"ckpt_path={part_way}"))
    assert resumed["steps"] == STEPS and resumed["flops_seen"] == summary["flops_seen"] > 0  # counts carried over
    again = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    for key, value in last["state_dict"].items():
        assert torch.equal(again["state_dict"][key], value), f"{name}: {key} differs after resuming at step {HALF}"


@pytest.fixture(scope="module")
def tiny_ner(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CoNLL-format folder (train = validation) of 24 made-up sentences: no shared data needed."""
    lines = []
    for i in range(24):
        lines += ["Mr NNP B-NP O", f"Smith{i % 3} NNP I-NP I-PER", "visited VBD B-VP O", f"Paris{i % 2} NNP B-NP I-LOC",
                  ". . O O", ""]
    root = tmp_path_factory.mktemp("tiny-ner")
    for split in ("eng.train", "eng.testa"):
        (root / split).write_text("-DOCSTART- -X- -X- O\n\n" + "\n".join(lines))
    return root


@pytest.mark.slow
@pytest.mark.parametrize("name", OBJECTIVES)
def test_the_checkpoint_fine_tunes_and_is_diagnosed(name, runs, tiny_ner, tmp_path):
    results = run_finetune(finetune_config(tmp_path / "ner", "task=conll2003", f"pretrained={runs[name]}",
                                           f"task.data.source={tiny_ner}", "task.epochs=1"))
    assert results["steps"] > 0 and results["metrics"]["validation"]["f1"] is not None
    summary = json.loads((runs[name] / "summary.json").read_text())
    assert "all" in summary["own_below_unigram"]  # the learning gate can read every objective
    if not is_language_model(load_pretrained(runs[name]).objective_class):
        with pytest.raises(ValueError, match="not a language model"):
            run_diagnostics(evaluate_config([f"output_dir={tmp_path / 'diagnostics'}", f"checkpoint={runs[name]}"]))
        return
    report = run_diagnostics(evaluate_config([f"output_dir={tmp_path / 'diagnostics'}", f"checkpoint={runs[name]}",
                                              "pairs=2", "candidates=4", "sentences.max_tokens=20",
                                              "representations.sentences=4"]))
    assert set(report["pairwise"]) == {"contiguous", "random"} and report["representations"]
    assert (tmp_path / "diagnostics" / "diagnostics.json").is_file()


@pytest.mark.parametrize("name", OBJECTIVES)
def test_the_checkpoint_is_scored_zero_shot_by_every_method_its_class_names(name, untrained, tmp_path):
    folder = tmp_path / "blimp"
    folder.mkdir()
    rows = [{"sentence_good": g, "sentence_bad": b, "field": "syntax", "linguistics_term": "agreement", "UID": "agr"}
            for g, b in (("the cat sleeps .", "the cat sleep ."), ("these dogs run .", "these dogs runs ."))]
    (folder / "agr.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    settings = [f"checkpoint={untrained[name]}", f"blimp.dir={folder}", f"output_dir={tmp_path / 'zeroshot'}",
                "bootstrap.resamples=100"]
    cls = load_pretrained(untrained[name]).objective_class
    if not is_language_model(cls):  # refused with the fix, before anything is written; so are sampling and export
        for refused in (lambda: run_zeroshot(zeroshot_config(settings)), lambda: generator_for(cls),
                        lambda: read_source(untrained[name])):
            with pytest.raises(ValueError, match="not a language model.*fine-tune"):
                refused()
        assert not (tmp_path / "zeroshot").exists()
        return
    report = run_zeroshot(zeroshot_config(settings))
    methods = available_methods(cls)
    assert methods and report["settings"]["methods"] == list(methods)
    for method in methods:  # a log-probability (or minus a bound): finite and negative
        assert -20 < report["blimp"]["log_prob_per_token"][method] < 0


@pytest.mark.parametrize("name", OBJECTIVES)
def test_the_checkpoint_answers_lm_evaluation_harness_by_every_method_its_class_names(name, untrained):
    pytest.importorskip("lm_eval", reason="lm-evaluation-harness is not installed: pip install -e '.[lm-eval]'")
    from lm_eval.api.instance import Instance

    from armlm.zeroshot.harness import ArmlmLM

    text = "the river runs through the old town and the people of the town"
    if not is_language_model(load_pretrained(untrained[name]).objective_class):
        with pytest.raises(ValueError, match="not a language model"):
            ArmlmLM(checkpoint=str(untrained[name]))
        return
    for method in available_methods(load_pretrained(untrained[name]).objective_class):
        lm = ArmlmLM(checkpoint=str(untrained[name]), method=method)
        (score, greedy), = lm.loglikelihood([Instance("loglikelihood", {}, ("the river runs", " through the"), 0)],
                                           disable_tqdm=True)
        (rolling,) = lm.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, (text,), 0)], disable_tqdm=True)
        assert score < 0 and rolling < score and isinstance(greedy, bool)
    (generated,) = lm.generate_until([Instance("generate_until", {}, ("the river", {"max_gen_toks": 3}), 0)])
    assert isinstance(generated, str)
