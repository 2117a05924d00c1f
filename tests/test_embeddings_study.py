"""The embeddings study: its stages, the word-benchmark quantity its findings read, its gate and its table."""

import json
from pathlib import Path

import pytest

from armlm.analysis.reports.embeddings_report import embeddings_table, markdown, write_embeddings_report
from armlm.analysis.reports.findings_report import findings_table
from armlm.analysis.tables.study_runs import StudyRuns
from armlm.common.config import compose_config
from armlm.common.migrations import versioned
from armlm.studies.embeddings_plan import plan
from tests.helpers.configs import composed_config
from tests.helpers.findings import side_values

REPO = Path(__file__).resolve().parents[1]


def study_config(*overrides: str):
    return composed_config("study", ["study=embeddings", "scale=cpu", *overrides])


def stage_config(stage):
    return compose_config(stage.command.config, list(stage.overrides))


@pytest.mark.slow
def test_static_arms_train_then_tag_and_checkpoint_arms_wait_for_the_other_studys_runs(tmp_path):
    source = tmp_path / "findings"
    cfg = study_config("seeds=2", f"root={tmp_path / 'study'}", f"checkpoints_from={source}")
    stages = plan(cfg)
    static = [a for a in cfg.study.arms.values() if "method" in a]
    contextual = [a for a in cfg.study.arms.values() if "checkpoint_arm" in a]
    assert len(stages) == 2 * (2 * len(static) + sum(2 + len(a.finetune) for a in contextual))
    assert len({s.folder for s in stages}) == len(stages)
    for stage in (s for s in stages if s.seed == 2):
        config = stage_config(stage)  # raises on an override of a key that does not exist
        if stage.kind == "embed" and stage.arm == "glove":
            assert config.method._target_.endswith("GloveMethod") and config.seed == 2
        if stage.kind == "finetune" and stage.arm == "fasttext":
            assert config.vectors == str(tmp_path / "study" / "fasttext" / "seed2" / "embed")
            assert config.task.data.max_length == 64 and config.task.epochs == 1  # the checkpoints' cut, one epoch
            assert config.task.data.max_train_examples is None
            assert stage.needs == (tmp_path / "study" / "fasttext" / "seed2" / "embed" / "words.json",)
        if stage.arm == "mlm":
            run = source / "mlm" / "seed2" / "pretrain"
            # waits for the findings study's run of the same seed, and for its weights (a record keeps none)
            assert stage.needs == (run / "summary.json", run / "checkpoints" / "last.ckpt")
            if stage.kind == "finetune":
                assert config.pretrained == str(run) and config.finetune.mode == "features"
    mixes = [stage_config(s).finetune.features for s in stages if s.label == "finetune conll2003-mix"]
    assert mixes and set(mixes) == {"scalar_mix"}
    assert not [s for s in stages if s.kind == "diagnose" and "method" in cfg.study.arms[s.arm]]  # nothing to gate


@pytest.mark.parametrize("overrides,match", [
    (["+study.arms.odd={method: glove, checkpoint_arm: ar}"], "not both"),
    (["+study.arms.odd={method: glove, finetune: [nope]}"], "not in study.finetune_variants"),
    (["checkpoints_from=null"], "checkpoints_from"),
])
def test_bad_embeddings_study_settings_are_refused(overrides, match, tmp_path):
    cfg = study_config(f"root={tmp_path}", "checkpoints_from=/x", *overrides)
    with pytest.raises(ValueError, match=match):
        plan(cfg)


def write(path: Path, content: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(versioned(content)))


def scores(simlex: float, semantic: float, rare: float | None = 0.1) -> dict:
    similarity = {"spearman": simlex, "pairs": 400, "coverage": 0.5, "rare_spearman": rare, "rare_pairs": 800}
    groups = {g: {"accuracy": semantic, "questions": 100, "coverage": 0.2} for g in ("semantic", "syntactic", "overall")}
    return {"simlex999": similarity, "wordsim353": similarity, "analogies": {**groups, "sections": {}}}


def ner(root: Path, arm: str, seed: int, variant: str, f1: float) -> None:
    write(root / arm / f"seed{seed}" / "finetune" / f"conll2003-{variant}" / "results.json", {
        "task": "conll2003", "seed": seed, "mode": "features", "attention": None,
        "metrics": {"validation": {"f1": f1}}, "majority_baseline": {"validation": {"f1": 0.0}}, "primary_metric": "f1"})


@pytest.fixture
def study_folder(tmp_path: Path) -> Path:
    for seed in (1, 2, 3):
        write(tmp_path / "word2vec_skipgram" / f"seed{seed}" / "embed" / "words.json",
              {"layers": {"static": scores(0.2 + 0.01 * seed, 0.10)}})
        write(tmp_path / "word2vec_cbow" / f"seed{seed}" / "embed" / "words.json",
              {"layers": {"static": scores(0.1, 0.02 + 0.001 * seed, rare=None)}})
        write(tmp_path / "mlm" / f"seed{seed}" / "embed" / "words.json",
              {"layers": {"0": scores(0.05, 0.0), "1": scores(0.15, 0.01)}})
        ner(tmp_path, "word2vec_skipgram", seed, "static", 0.30)
        ner(tmp_path, "mlm", seed, "concat4", 0.60 + 0.01 * seed)
        write(tmp_path / "mlm" / f"seed{seed}" / "diagnostics" / "diagnostics.json",
              {"likelihood": {"below_unigram": 2.0 if seed != 2 else 0.2, "blocks_fingerprint": "b"}})
    return tmp_path


def test_word_scores_are_read_per_layer_and_a_missing_score_drops_the_seed(study_folder):
    runs = StudyRuns.read(study_folder)
    side = {"arm": "word2vec_skipgram", "words": {"benchmark": "analogies", "metric": "semantic", "layer": "static"}}
    assert side_values(runs, side) == pytest.approx({1: 0.10, 2: 0.10, 3: 0.10})
    assert side_values(runs, {"arm": "mlm", "words": {"benchmark": "simlex999", "metric": "spearman", "layer": 1}}) == \
        pytest.approx({1: 0.15, 2: 0.15, 3: 0.15})
    rare = {"arm": "word2vec_cbow", "words": {"benchmark": "simlex999", "metric": "rare_spearman", "layer": "static"}}
    assert side_values(runs, rare) == {}  # no rho (too few rare pairs): no value rather than a zero
    with pytest.raises(ValueError, match="not '7'"):
        side_values(runs, {"arm": "mlm", "words": {"benchmark": "simlex999", "metric": "spearman", "layer": 7}})


def registered(a: dict, b: dict) -> dict:
    return {"claim": "c", "anchor": "p", "justification": "j", "a": a, "b": b,
            "test": {"kind": "superiority", "direction": "greater", "smallest_effect": 0.01},
            "registered": {"date": "2026-11-25", "commit": "abc1234"}}


def test_the_gate_judges_the_checkpoint_arms_and_leaves_static_arms_out(study_folder):
    arms = {"word2vec_skipgram": {"method": "word2vec_skipgram", "gate": False},
            "word2vec_cbow": {"method": "word2vec_cbow", "gate": False}, "mlm": {"checkpoint_arm": "mlm"}}
    static_only = registered({"arm": "word2vec_skipgram", "words": {"benchmark": "analogies", "metric": "semantic"}},
                             {"arm": "word2vec_cbow", "words": {"benchmark": "analogies", "metric": "semantic"}})
    contextual = registered({"arm": "mlm", "finetune": "conll2003-concat4", "metric": "f1"},
                            {"arm": "word2vec_skipgram", "finetune": "conll2003-static", "metric": "f1"})
    study = {"arms": arms, "gate": {"min_below_unigram": 0.5}, "findings": {"E3": static_only, "E1": contextual}}
    table = findings_table(study_folder, study, adjust=False).set_index("finding")
    assert table.loc["E3", "verdict"] == "reproduced" and not table.loc["E3", "gate_failed"]
    assert table.loc["E1", "verdict"] == "not evidence"  # MLM's seed 2 sits 0.2 nats below unigram
    assert "mlm seed 2" in table.loc["E1", "gate_note"] and "word2vec" not in table.loc["E1", "gate_note"]


@pytest.mark.slow
def test_the_table_has_every_representation_with_intervals_over_seeds(study_folder):
    table = embeddings_table(study_folder)
    text = markdown(table)
    assert "| mlm | layer 1 | 3 | 0.150 ± 0.000 |" in text
    assert "| mlm | features: top 4 concatenated | 3 | - | - | - | - | - | 0.620 ± 0.025 |" in text
    assert "| word2vec_skipgram | vectors | 3 | 0.220 ± 0.025 |" in text
    written = write_embeddings_report(study_folder)
    assert {p.name for p in written} == {"embeddings.csv", "embeddings.md", "embeddings_by_layer.png"}
