"""A study of published models (configs/study/published*.yaml): arms that name a model source plan no pretraining,
read the model as it is in every stage, and run end to end on local Hugging Face folders with the findings report's
registration and gate rules."""

from __future__ import annotations

import pytest

from armlm.studies.plan import plan
from armlm.studies.run import run_study
from tests.helpers.configs import study_config


@pytest.mark.parametrize("study", ["published", "published_ettin"])
def test_a_published_arm_plans_no_pretraining_and_reads_its_model_everywhere(study, tmp_path):
    cfg = study_config(f"study={study}", "scale=gpu", "seeds=2", f"root={tmp_path}")
    stages = plan(cfg)
    assert stages and not any(s.kind == "pretrain" for s in stages) and all(s.needs == () for s in stages)
    for stage in stages:
        model = cfg.study.arms[stage.arm].model
        key = "pretrained" if stage.kind == "finetune" else "checkpoint"
        assert f"{key}={model}" in stage.overrides and str(model).startswith("hf:")
    finetunes = [s for s in stages if s.kind == "finetune"]
    assert {f"seed={k}" for k in (1, 2)} == {o for s in finetunes for o in s.overrides if o.startswith("seed=")}


@pytest.mark.parametrize("bad,match", [
    ({"model": "hf:gpt2", "pretrain": ["objective=ar"]}, "either pretrains"),
    ({"model": "hf:gpt2", "modle": 1}, "unknown keys"),
])
def test_an_arm_names_one_source_of_its_model(bad, match, tmp_path):
    overrides = [f"+study.arms.odd.{k}={v}".replace("'", '"') for k, v in bad.items()]
    with pytest.raises(ValueError, match=match):
        plan(study_config("study=published", "scale=gpu", "seeds=1", f"root={tmp_path}", *overrides))


@pytest.mark.slow
def test_a_published_study_runs_on_local_folders_and_reports_interim_rows(hf_models, blimp_dir, data_dir, tmp_path,
                                                                           monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    def listed(key: str, *items: str) -> str:
        return f"{key}=[" + ",".join(f'"{item}"' for item in items) + "]"

    cfg = study_config(
        "study=published", "scale=smoke", "seeds=1", "tasks=[conll2003]", f"root={tmp_path / 'root'}", "launcher=in_process",
        f"study.arms.bert.model={hf_models['bert']}", f"study.arms.gpt2.model={hf_models['gpt2']}",
        listed("study.finetune_settings", "task.data.max_train_examples=32", "task.data.max_eval_examples=16",
               "task.epochs=1", "task.data.max_length=64", "trainer.precision=32-true"),
        listed("extra_finetune", f"task.data.source={data_dir / 'conll2003'}"),
        listed("study.diagnose.settings", "pairs=2", "candidates=5", "sentences.max_tokens=20",
               "representations.sentences=4", "likelihood.block_size=32", "likelihood.blocks=2",
               "likelihood.max_draws=4"),
        listed("study.zeroshot.settings", f"blimp.dir={blimp_dir}", "bootstrap.resamples=50"))
    outcomes = run_study(cfg)
    assert {o.stage.kind for o in outcomes} == {"finetune", "diagnose", "zeroshot"}
    report = (tmp_path / "root" / "report" / "findings.md").read_text()
    for row in ("PUB_mask", "PUB_as_used", "PUB_bidirectional"):
        assert row in report
    assert "interim: 1 of its 3 registered seeds" in report
