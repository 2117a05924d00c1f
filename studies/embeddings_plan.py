"""The embeddings study's stages (configs/study/embeddings.yaml): static methods trained per seed, and another
study's AR and MLM checkpoints read as they are. Folders under the study root:

    <root>/<arm>/seed<k>/embed                       words.json (+ the vectors folder for a static method)
    <root>/<arm>/seed<k>/finetune/conll2003-<v>      results.json: NER on static vectors, or on frozen layers
    <root>/<arm>/seed<k>/diagnostics                 diagnostics.json: a checkpoint's common-scale likelihood (the gate)

A static arm names its `method` (configs/method/); a contextual arm names `checkpoint_arm`, an arm of the study
in `checkpoints_from` whose seed-k pretraining it reads (its stages wait until that run exists).
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from armlm.common.errors import ArmlmError
from armlm.studies.arms import EmbeddingsArm, parse_arms
from armlm.studies.plan import Stage, seed_folder, seeds_of, selected
from armlm.studies.stages import done_file


def embeddings_arms(cfg: DictConfig) -> dict[str, EmbeddingsArm]:
    """The study's arms, parsed (studies.arms) and checked, once per plan."""
    study = cfg.study
    arms = parse_arms(EmbeddingsArm, OmegaConf.to_container(study.arms, resolve=True))
    for name, arm in arms.items():
        if arm.given("method") == arm.given("checkpoint_arm"):
            raise ArmlmError(f"arm {name}: an arm names a static `method` or a `checkpoint_arm` of the study in "
                             "checkpoints_from (not both), and its `finetune` variants")
        unknown = [v for v in arm.finetune or () if v not in study.finetune_variants]
        if unknown:
            raise ArmlmError(f"arm {name}: fine-tuning variants {unknown} are not in study.finetune_variants "
                             f"({list(study.finetune_variants)})")
    if not cfg.get("checkpoints_from"):
        raise ArmlmError("study=embeddings reads another study's checkpoints: give checkpoints_from=<its root>, e.g. "
                         "the findings study's folder")
    return arms


def plan(cfg: DictConfig) -> list[Stage]:
    """Per seed and arm: the embed stage (`armlm embeddings`), then NER on what it gives; a contextual arm also gets
    the learning gate's likelihood (`armlm evaluate`), as every pretraining arm of the findings study does."""
    arms = embeddings_arms(cfg)
    study, source = cfg.study, Path(cfg.checkpoints_from)
    shared = [f"data={cfg.corpus}", *[str(s) for s in study.get("embed_settings") or []]]
    stages: list[Stage] = []
    for seed in seeds_of(cfg):
        for name, arm in selected(cfg, arms).items():
            base = seed_folder(cfg, name, seed)
            if arm.given("method"):
                reads, needs = [f"vectors={base / 'embed'}"], (base / "embed" / done_file("embed"),)
                stages.append(Stage("embed", name, seed, "embed", base / "embed",
                                    (f"method={arm.method}", f"seed={seed}", *shared)))
            else:
                run = source / arm.checkpoint_arm / f"seed{seed}" / "pretrain"
                # the checkpoint too: a run restored from a study record has its summary but no weights
                reads, needs = [f"pretrained={run}"], (run / done_file("pretrain"), run / "checkpoints" / "last.ckpt")
                stages.append(Stage("embed", name, seed, "embed", base / "embed",
                                    (f"checkpoint={run}", f"seed={seed}", *shared), needs=needs))
                stages.append(Stage("diagnose", name, seed, "diagnose", base / "diagnostics", (
                    f"checkpoint={run}", f"data={cfg.corpus}", f"seed={seed}", "independence=false",
                    "representations.enabled=false", *[str(s) for s in cfg.diagnose or []]), needs=needs))
            for variant in arm.finetune or ():
                stages.append(Stage("finetune", name, seed, f"finetune conll2003-{variant}",
                                    base / "finetune" / f"conll2003-{variant}", (
                    "task=conll2003", *reads, f"seed={seed}", *[str(s) for s in study.finetune_variants[variant]],
                    *[str(s) for s in cfg.finetune or []], *[str(s) for s in study.get("finetune_settings") or []]),
                    needs=needs))
    return stages


plan.study_settings = ("name", "arms", "finetune_variants", "embed_settings", "finetune_settings")  # studies.run
plan.launch_settings = ("checkpoints_from",)  # studies.run.PLANNER_LAUNCH_SETTINGS
