"""`armlm study`'s plan: every preset's stages compose, a FLOPs budget reaches every arm, and bad settings are refused
before any work (running the planned stages: tests/test_study_runner.py)."""

import re
from pathlib import Path

import pytest

from armlm.common.config import compose_config
from armlm.common.errors import ArmlmError
from armlm.studies.plan import plan
from armlm.studies.run import check_study_settings, registrations, run_study, study_function
from armlm.studies.runner import refuse_stages_that_cannot_start
from armlm.training.preflight import check_config
from tests.helpers.configs import study_config
from tests.helpers.lanes import fast_lane_keeps

REPO = Path(__file__).resolve().parents[1]
# Every preset of the pretrain -> fine-tune -> diagnose pipeline, discovered; a study with its own planner (the
# embeddings study) is tested beside its planner (tests/test_embeddings_study.py).
STUDIES = sorted(p.stem for p in (REPO / "configs" / "study").glob("*.yaml") if "\nplanner:" not in p.read_text())


def stage_config(stage):
    """The config the stage's process would compose (its command's config plus its overrides)."""
    return compose_config(stage.command.config, list(stage.overrides))


# The headline study composes in the fast lane; every other preset and scale with the slow tests (CI).
PRESETS = fast_lane_keeps([(study, scale) for study in STUDIES for scale in ("smoke", "cpu", "gpu")],
                          keep=[("findings", "cpu")])


@pytest.mark.parametrize(("study", "scale"), PRESETS)
def test_every_preset_plans_stages_whose_configs_compose(study, scale, tmp_path):
    cfg = study_config(f"study={study}", f"scale={scale}", "seeds=2", f"root={tmp_path}")
    if cfg.study.get("budget_kind") == "flops":  # registered at equal compute: its command gives budget= in FLOPs
        cfg = study_config(f"study={study}", f"scale={scale}", "seeds=2", f"root={tmp_path}", "budget=3.8e13")
    stages = plan(cfg)
    arms = cfg.study.arms
    tasks = cfg.tasks or cfg.study.tasks
    finetune_seeds = cfg.study.get("finetune_seeds", 1)
    own = [arm for arm in arms.values() if "pretrain" in arm]  # arms that pretrain (not from_arm, not a model)
    diagnosed = [arm for arm in arms.values() if arm.get("diagnose", not arm.get("from_arm"))]
    scored = [arm for arm in arms.values() if cfg.study.get("zeroshot") is not None
              and arm.get("zeroshot", not arm.get("from_arm"))]
    milestones = len((cfg.study.get("zeroshot") or {}).get("at_words") or [])  # each pretraining arm scored at each
    per_seed = len(own) + len(diagnosed) + len(scored) + milestones * len([a for a in own if a in scored]) + sum(
        len(tasks) * len(arm.get("finetune", cfg.study.default_variants)) * finetune_seeds for arm in arms.values())
    assert len(stages) == 2 * per_seed
    assert len({s.folder for s in stages}) == len(stages)  # no two stages share a run folder
    # one stage of each shape composes and passes its command's check, as a launch requires (studies.runner)
    refuse_stages_that_cannot_start(stages, {})
    for pretraining in [s for s in stages if s.kind == "pretrain" and s.seed == 2][:1]:  # none: published models
        config = stage_config(pretraining)
        assert config.seed == 2 and config.data.corpus._target_


@pytest.mark.slow
def test_a_study_registered_at_equal_flops_budgets_every_arm_in_flops_and_refuses_tokens(tmp_path):
    cfg = study_config("study=efficiency", "scale=cpu", "seeds=1", f"root={tmp_path}", "budget=3.8e13")
    pretraining = [s for s in plan(cfg) if s.kind == "pretrain"]
    assert len(pretraining) == 5 and all({"max_tokens=null", "max_flops=38000000000000"} <= set(s.overrides)
                                         for s in pretraining)
    with pytest.raises(ValueError, match="looks like a token count"):  # the scale's 2.2M tokens, not FLOPs
        plan(study_config("study=efficiency", "scale=cpu", "seeds=1", f"root={tmp_path}"))
    with pytest.raises(ValueError, match="registered at an equal budget of flops"):
        plan(study_config("study=efficiency", "scale=cpu", "seeds=1", f"root={tmp_path}", "budget_kind=tokens"))
    tokens = study_config("study=findings", "scale=cpu", "seeds=1", f"root={tmp_path}")
    assert all("max_tokens=2200000" in s.overrides for s in plan(tokens) if s.kind == "pretrain")  # the default


def test_a_study_that_names_its_corpus_reads_it_whatever_the_scale(tmp_path):
    own = study_config("study=packing", "scale=cpu", "seeds=1", f"root={tmp_path}", "corpus=brown")
    pretraining = [s for s in plan(own) if s.kind == "pretrain"]
    assert pretraining and all("data=enwiki_short" in s.overrides and "data=brown" not in s.overrides
                               for s in pretraining)
    other = study_config("study=findings", "scale=cpu", "seeds=1", f"root={tmp_path}", "corpus=brown")
    assert all("data=brown" in s.overrides for s in plan(other) if s.kind == "pretrain")


def test_a_zeroshot_section_scores_every_pretraining_arm_with_its_own_methods(tmp_path):
    cfg = study_config("study=ar_vs_mlm", "scale=cpu", "seeds=1", f"root={tmp_path}",
                       "+study.zeroshot.settings=['blimp.max_pairs=50']",
                       "+study.arms.mlm.zeroshot_settings=['methods=[pll]']", "+study.arms.ar_pred.zeroshot=false")
    stages = {s.name: s for s in plan(cfg) if s.kind == "zeroshot"}
    assert set(stages) == {f"{a}/seed1 zeroshot" for a in cfg.study.arms if a != "ar_pred"}
    mlm = stages["mlm/seed1 zeroshot"]
    assert mlm.overrides == (f"checkpoint={tmp_path}/mlm/seed1/pretrain", "seed=1", "blimp.max_pairs=50",
                             "methods=[pll]")
    assert mlm.needs == (tmp_path / "mlm" / "seed1" / "pretrain" / "summary.json",)
    assert mlm.folder == tmp_path / "mlm" / "seed1" / "zeroshot" and mlm.done_file.name == "zeroshot.json"
    config = stage_config(mlm)
    assert list(config.methods) == ["pll"] and config.blimp.max_pairs == 50
    assert not any(s.kind == "zeroshot" for s in plan(study_config("study=ar_vs_mlm", "scale=cpu", "seeds=1",
                                                                   f"root={tmp_path}")))


def test_task_settings_apply_to_their_task_only_and_come_last(tmp_path):
    cfg = study_config("study=curricula", "scale=cpu", "seeds=1", f"root={tmp_path}")
    stages = {s.name: stage_config(s) for s in plan(cfg) if s.kind == "finetune" and s.arm == "ar_mlm_50"}
    conll, sst2 = stages["ar_mlm_50/seed1 finetune conll2003-full"], stages["ar_mlm_50/seed1 finetune sst2-full"]
    assert conll.task.data.max_train_examples is None and conll.task.epochs == 1
    assert sst2.task.data.max_train_examples == 4000 and sst2.task.epochs == 2
    assert conll.task.data.max_eval_examples is None and sst2.task.data.max_eval_examples is None


def test_equal_predicted_tokens_arm_and_shared_candidates(tmp_path):
    cfg = study_config("study=ar_vs_mlm", "scale=cpu", "seeds=1", f"root={tmp_path}", "budget=1000000")
    stages = {s.name: s for s in plan(cfg)}
    assert "max_tokens=1000000" in stages["mlm/seed1 pretrain"].overrides
    assert "max_tokens=150000" in stages["ar_pred/seed1 pretrain"].overrides
    reference = tmp_path / "mlm" / "seed1" / "diagnostics" / "diagnostics.json"
    assert f"candidates_from={reference}" in stages["ar/seed1 diagnose"].overrides
    assert reference in stages["ar/seed1 diagnose"].needs
    assert not any(o.startswith("candidates_from") for o in stages["mlm/seed1 diagnose"].overrides)
    variants = [name.split()[-1] for name in stages if name.startswith("ar/seed1 finetune")]
    assert variants == [f"{t}-{v}" for t in cfg.study.tasks for v in ("full", "bidirectional", "features")]
    assert "finetune.attention=bidirectional" in stages["ar/seed1 finetune rte-bidirectional"].overrides


@pytest.mark.slow
def test_a_flops_budget_kind_gives_every_arm_max_flops_and_no_token_budget(tmp_path):
    at_flops = ("study=ar_vs_mlm", "scale=cpu", "seeds=1", f"root={tmp_path}", "budget_kind=flops")
    cfg = study_config(*at_flops, "budget=2e13", "~study.arms.ar_pred")
    stages = {s.name: s for s in plan(cfg)}
    mlm = stages["mlm/seed1 pretrain"]
    assert {"max_tokens=null", "max_flops=20000000000000"} <= set(mlm.overrides)
    check_config(stage_config(mlm))  # one budget, as train.py requires
    # ar_pred's 0.15 is a share of the *token* budget (equal predicted tokens): refused, not silently rescaled
    with pytest.raises(ValueError, match=r"arms \['ar_pred'\] are defined in input tokens"):
        plan(study_config(*at_flops, "budget=2e13"))
    with pytest.raises(ValueError, match="looks like a token count"):  # the scale's 2.2M tokens, read as FLOPs
        plan(study_config(*at_flops, "~study.arms.ar_pred"))
    with pytest.raises(ValueError, match="budget_kind='steps'"):
        plan(study_config("study=ar_vs_mlm", "scale=cpu", "seeds=1", f"root={tmp_path}", "budget_kind=steps"))
    with pytest.raises(ValueError, match="use budget_kind=tokens"):
        plan(study_config("study=arm_kinds", "scale=cpu", "seeds=1", f"root={tmp_path}", "budget_kind=flops",
                          "budget=2e13"))


def test_curve_arms_pass_over_the_whole_split(tmp_path):
    """A curve's budgets are passes over the whole train split (no slice), each with a schedule of its own: the
    1-pass run is its line's trunk, which saves the decay start of each shorter one; they branch off it there. The
    2-pass run is a run of its own (a unit that fits a session)."""
    cfg = study_config("study=curves", "scale=cpu", "seeds=1", f"root={tmp_path}")
    stages = plan(cfg)
    pretrain = {s.arm: s for s in stages if s.kind == "pretrain"}
    assert len(pretrain) == 12
    for objective in ("ar", "mlm", "hybrid"):
        for name, epochs in (("w2m5", 0.25), ("w5m", 0.5), ("w10m", 1), ("w20m", 2)):
            overrides = pretrain[f"{objective}_{name}"].overrides
            assert {"max_tokens=null", f"data_epochs={epochs}", f"objective={objective}"} <= set(overrides)
            assert not any(o.startswith("data.max_train_tokens") for o in overrides)
            assert "optim.decay_fraction=0.2" in overrides
            if objective == "hybrid":  # its mask rate follows its budget: every budget is a run of its own
                assert not any(o.startswith("branch") for o in overrides)
        if objective == "hybrid":
            continue
        trunk = pretrain[f"{objective}_w10m"]
        assert "branch_budgets=[0.25,0.5]" in trunk.overrides and not trunk.needs
        assert not any(o.startswith("branch") for o in pretrain[f"{objective}_w20m"].overrides)
        for name in ("w2m5", "w5m"):
            branch = pretrain[f"{objective}_{name}"]
            assert f"branch_from={trunk.folder}" in branch.overrides
            assert branch.needs == (trunk.done_file,)
            assert stages.index(trunk) < stages.index(branch)
    check_config(stage_config(pretrain["hybrid_w20m"]))
    check_config(stage_config(pretrain["mlm_w5m"]))
    kinds = [s.kind for s in stages]
    assert kinds.count("finetune") == kinds.count("zeroshot") == kinds.count("diagnose") == 12


@pytest.mark.slow
def test_data_constrained_arms_repeat_the_same_unique_tokens(tmp_path):
    cfg = study_config("study=data_constrained", "scale=cpu", "seeds=1", f"root={tmp_path}")
    stages = {s.name: s for s in plan(cfg) if s.kind == "pretrain"}
    unique = cfg.study.unique_tokens
    for epochs in (1, 4, 16):
        for objective in ("ar", "mdlm"):
            overrides = stages[f"{objective}_e{epochs}/seed1 pretrain"].overrides
            # passes over the slice, which train.py turns into the input tokens the loader gives per pass
            assert {"max_tokens=null", f"data_epochs={epochs}", f"data.max_train_tokens={unique}"} <= set(overrides)
            check_config(stage_config(stages[f"{objective}_e{epochs}/seed1 pretrain"]))
    assert "data.max_train_tokens=1048576" in stages["mdlm_fresh16/seed1 pretrain"].overrides  # its own slice
    diagnose = [s for s in plan(cfg) if s.kind == "diagnose"]
    assert len(stages) == len(diagnose) == 12 and len(plan(cfg)) == 24  # no fine-tuning; each run on the gate's scale
    assert all({"independence=false", "representations.enabled=false"} <= set(s.overrides) for s in diagnose)
    with pytest.raises(ValueError, match="unique_tokens"):
        plan(study_config("study=data_constrained", "scale=cpu", f"root={tmp_path}", "study.unique_tokens=0"))
    with pytest.raises(ValueError, match="epochs or budget_scale, not both"):
        plan(study_config("study=data_constrained", "scale=cpu", f"root={tmp_path}",
                          "+study.arms.ar_e1.budget_scale=2"))
    with pytest.raises(ValueError, match="relative_to='ar_e5' is not one of the arms"):  # where registrations are read
        registrations(study_config("study=data_constrained", "scale=cpu", f"root={tmp_path}",
                                   "study.findings.F7_diffusion_pays_less.b.relative_to=ar_e5"))


@pytest.mark.slow
def test_findings_plan_pairs_finetuning_seeds_across_arms_and_grows_by_first_seed(tmp_path):
    cfg = study_config("study=arm_kinds", "scale=cpu", "first_seed=4", "seeds=2", "study.finetune_seeds=3",
                       f"root={tmp_path}")
    stages = plan(cfg)
    assert sorted({s.seed for s in stages}) == [4, 5]  # first_seed=4 seeds=2: seeds 4 and 5, no others
    finetune = [s for s in stages if s.kind == "finetune" and s.seed == 4]
    seeds_by_arm = {}
    for s in finetune:
        seed = next(o for o in s.overrides if o.startswith("seed="))
        seeds_by_arm.setdefault((s.arm, s.label.split()[-1].rsplit("-ft", 1)[0]), []).append(seed)
    # every checkpoint is fine-tuned with the same three seeds, whatever its arm: the comparison is paired
    assert set(map(tuple, seeds_by_arm.values())) == {("seed=401", "seed=402", "seed=403")}
    assert {s.folder.name for s in finetune if s.arm == "mlm"} == {
        f"conll2003-{v}-ft{j}" for v in ("full", "features") for j in (1, 2, 3)}
    diagnose = {s.arm: s for s in stages if s.kind == "diagnose" and s.seed == 4}
    pretrain = {s.arm: s for s in stages if s.kind == "pretrain" and s.seed == 4}
    # every pretraining arm is scored on the common learning scale (the gate), mlm_sentence reads mlm's run
    assert set(diagnose) == set(pretrain) | {"mlm_sentence"}
    assert set(pretrain) == {"ar", "mlm", "mlm_nsp", "mlm_mask100", "ar_half", "mlm_half", "masked_diffusion",
                             "prefix_lm"}
    for arm in set(pretrain) - {"ar", "mlm"}:  # likelihood only: the gate, and F6's bound
        assert diagnose[arm].overrides[-2:] == ("independence=false", "representations.enabled=false")
    assert "objective.copy_rate=0.15" in pretrain["masked_diffusion"].overrides
    # mlm_sentence scores the mlm run's checkpoint inside whole sentences (the paper's setting for F3)
    assert f"checkpoint={tmp_path}/mlm/seed4/pretrain" in diagnose["mlm_sentence"].overrides
    assert diagnose["mlm_sentence"].overrides[-2:] == ("representations.enabled=false", "likelihood.enabled=false")
    assert "pair_context=sentence" in diagnose["mlm_sentence"].overrides
    assert diagnose["mlm_sentence"].needs == (tmp_path / "mlm" / "seed4" / "pretrain" / "summary.json",)
    assert {"candidates=null", "pair_context=prefix"} <= set(diagnose["ar"].overrides)
    assert not any(o.startswith("candidates_from") for o in diagnose["ar"].overrides)
    # F1's half budget: runs trained to half the tokens on their own schedule, not a mid-schedule checkpoint
    half = int(cfg.budget) // 2
    for arm in ("ar_half", "mlm_half"):
        assert f"max_tokens={half}" in pretrain[arm].overrides
    assert not any(o.startswith("save_at_tokens") for s in pretrain.values() for o in s.overrides)
    with pytest.raises(ValueError, match="b.arm='bert'"):
        registrations(study_config("study=findings", "scale=cpu", f"root={tmp_path}", "study.findings.F1.b.arm=bert"))


@pytest.mark.parametrize("overrides,match", fast_lane_keeps([
    (["arm=bert"], "arm='bert' is not in study ar_vs_mlm"),
    (["seeds=0"], "seeds=0"),
    (["first_seed=0"], "first_seed=0"),
    # seed= alone was run, and seeds= (or first_seed=) changed nothing
    (["seed=2", "seeds=5"], r"^seed=2 runs that one seed, so seeds=5 would change nothing: give seed=, or seeds="),
    (["seed=2", "first_seed=4"], r"^seed=2 runs that one seed, so first_seed=4 would change nothing"),
    (["budget=0"], "budget=0"),
    (["study.diagnose.candidates_arm=bert"], "candidates_arm='bert'"),
    (["+study.arms.mlm.finetune=[full,prompting]"], r"variants \['prompting'\] are not defined"),
    (["+study.arms.mlm.finetunes=[full]"], r"unknown keys \['finetunes'\]"),
    (["+study.arms.mlm.diagnose=false"], "must be diagnosed"),
    (["study=arm_kinds", "+study.arms.mlm_sentence.checkpoint_fraction=1.5"], "checkpoint_fraction=1.5"),
    (["study=arm_kinds", "~study.arms.mlm_sentence.from_arm"], "either pretrains"),
    (["study=arm_kinds", "+study.arms.mlm_sentence.pretrain=[\"objective=ar\"]"], "either pretrains"),
    (["study=curves", "study.arms.ar_w5m.branch_of=mlm_w2m5"], "must name an earlier pretraining arm"),
    (["study=curves", "study.arms.ar_w5m.branch_of=ar_w20m"], "must name an earlier pretraining arm"),
    (["study=curves", "study.arms.ar_w5m.branch_of=ar_w2m5"], "must name an earlier pretraining arm"),
    (["study=curves", "study.arms.ar_w5m.epochs=3"], r"fewer epochs than its trunk ar_w10m \(1\)"),
    (["study=curves", "study.arms.ar_w5m.pretrain=[\"objective=mlm\"]"], "may differ only in epochs"),
], every=4))
def test_bad_study_settings_are_refused_before_any_work(overrides, match, tmp_path):
    with pytest.raises(ValueError, match=match):
        plan(study_config("scale=smoke", f"root={tmp_path}", *overrides))


def test_seeds_held_out_for_a_replication_are_refused_unless_it_is_the_replication(tmp_path):
    """The findings' seeds 6-8 are kept for an independent replication: a launch that would reach them (seeds=8, or
    seed=7 alone) is refused in one line, before any stage; the replication itself, or a study that keeps none,
    runs them."""
    for overrides, held in ((("seeds=8",), "[6, 7, 8]"), (("seed=7",), "[7]"), (("first_seed=5", "seeds=2"), "[6]")):
        with pytest.raises(ValueError, match=rf"^seeds {re.escape(held)} are held out for an independent replication "
                                             r"\(held_out_seeds=\[6, 7, 8\]\): .*first_seed=9.*replication=true.*held_out_seeds=\[\]"):
            plan(study_config(*overrides, f"root={tmp_path}"))
    assert {s.seed for s in plan(study_config("first_seed=5", "seeds=2", "replication=true", f"root={tmp_path}"))} == {5, 6}
    assert {s.seed for s in plan(study_config("seeds=8", "held_out_seeds=[]", f"root={tmp_path}"))} == set(range(1, 9))
    assert {s.seed for s in plan(study_config("first_seed=9", "seeds=2", f"root={tmp_path}"))} == {9, 10}
    assert not any(tmp_path.iterdir())


def planner_of_ones_own(cfg):
    """A study's own planner (study.planner=...) that declares no study_settings: it reads what it reads."""
    return []


@pytest.mark.parametrize("study", fast_lane_keeps(sorted(p.stem for p in (REPO / "configs" / "study").glob("*.yaml")),
                                                  keep=["findings", "embeddings"]))  # both of armlm's planners
def test_a_study_holds_only_settings_its_run_registrations_and_planner_read(study, tmp_path):
    """+study.alpa=0.01 (or `aplha:` in a study's YAML) judged every finding at the default alpha without a word:
    the study command refuses a key nothing reads, and every study armlm ships holds none."""
    check_study_settings(study_config(f"study={study}", "scale=smoke"), plan_of(study))
    with pytest.raises(ArmlmError, match=r"^study.alpa: armlm reads no such setting .*did you mean alpha\? study "):
        run_study(study_config(f"study={study}", "scale=smoke", f"root={tmp_path / 'study'}", "+study.alpa=0.01"))
    assert not (tmp_path / "study").exists()  # refused before anything was written
    check_study_settings(study_config(f"study={study}", "+study.alpa=0.01"), planner_of_ones_own)
    for section, typo, meant in (("zeroshot", "at_word", "at_words"), ("diagnose", "candidate_arm", "candidates_arm")):
        if study_config(f"study={study}").study.get(section) is not None:  # a section's own keys
            with pytest.raises(ArmlmError, match=rf"^study.{section}.{typo}: .*did you mean {meant}\? "):
                check_study_settings(study_config(f"study={study}", f"+study.{section}.{typo}=1"), plan_of(study))


def plan_of(study: str):
    return study_function(study_config(f"study={study}"), "planner", "armlm.studies.plan:plan")
