"""A study's stages: every arm x seed pretrained, fine-tuned on every task and variant, and diagnosed.

A stage is one run of an armlm command (studies.stages: train, finetune, evaluate, ...) with Hydra overrides and a fixed run folder
under the study root, so a rerun finds what is already done. Folders:

    <root>/<arm>/seed<k>/pretrain                    summary.json, checkpoints/last.ckpt, tensorboard/
    <root>/<arm>/seed<k>/finetune/<task>-<variant>   results.json
    <root>/<arm>/seed<k>/diagnostics                 diagnostics.json
    <root>/<arm>/seed<k>/zeroshot                    zeroshot.json (a study with a `zeroshot:` section)
    <root>/<arm>/seed<k>/milestones/chck_<N>M        zeroshot.json at each word milestone (zeroshot.at_words)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from armlm.analysis.tables.runs import FINETUNE_SEED_SUFFIX
from armlm.analysis.tables.study_tables import MILESTONES
from armlm.common.babylm import WORDS_CHECKPOINT, milestone_name
from armlm.common.errors import ArmlmError
from armlm.studies.arms import PipelineArm, parse_arms
from armlm.studies.branches import branch_overrides, check_branches, trunk_overrides
from armlm.studies.budget import budget_kind, budget_overrides, check_budget, part_way_point, part_way_tokens
from armlm.studies.stages import StageKind, done_file, stage_kind


@dataclass(frozen=True)
class Stage:
    kind: str  # pretrain | finetune | diagnose | zeroshot | embed
    arm: str
    seed: int
    label: str  # what it is within its arm and seed: "pretrain", "finetune rte-full", "diagnose"
    folder: Path
    overrides: tuple[str, ...]  # the Hydra overrides that define the run (the run folder is added at launch)
    needs: tuple[Path, ...] = ()  # done files of the stages whose output this one reads

    @property
    def name(self) -> str:
        return f"{self.arm}/seed{self.seed} {self.label}"

    @property
    def command(self) -> StageKind:
        """What it runs: its command's function, config and script."""
        return stage_kind(self.kind)

    @property
    def done_file(self) -> Path:
        return self.folder / done_file(self.kind)

    def record(self) -> dict[str, Any]:
        """What stage.json keeps, to tell a finished stage of this study from one of another (the command follows from
        the kind; stage.json written before the `armlm` namespace also names its script, which is not compared)."""
        return {"kind": self.kind, "arm": self.arm, "seed": self.seed, "overrides": list(self.overrides)}


def seed_folder(cfg: DictConfig, arm: str, seed: int) -> Path:
    return Path(cfg.root) / arm / f"seed{seed}"


DEFAULT_SEEDS = 3  # a study's seeds where seeds= is not given (configs/study.yaml)


def seeds_of(cfg: DictConfig) -> list[int]:
    """The launch's seeds; those held out for an independent replication only where it is that replication."""
    given = [f"{key}={cfg.get(key)}" for key in ("seeds", "first_seed") if cfg.get(key) is not None]
    if cfg.seed is not None and given:  # seed= alone was run, and seeds= changed nothing
        raise ArmlmError(f"seed={cfg.seed} runs that one seed, so {' '.join(given)} would change nothing: give seed=, "
                         "or seeds= (and first_seed=), not both")
    first = 1 if cfg.get("first_seed") is None else int(cfg.first_seed)
    count = DEFAULT_SEEDS if cfg.get("seeds") is None else int(cfg.seeds)
    if cfg.seed is None and (count < 1 or first < 1):
        raise ArmlmError(f"seeds={count}, first_seed={first}; seeds=N runs N seeds from first_seed (>= 1)")
    seeds = [int(cfg.seed)] if cfg.seed is not None else list(range(first, first + count))
    held = sorted(set(seeds) & {int(k) for k in cfg.get("held_out_seeds") or []})
    if held and not cfg.get("replication", False):
        raise ArmlmError(f"seeds {held} are held out for an independent replication (held_out_seeds="
                         f"{list(cfg.held_out_seeds)}): choose others (a study grows past them with first_seed="
                         f"{max(cfg.held_out_seeds) + 1}), give replication=true for the replication itself, or "
                         "held_out_seeds=[] for a study that keeps none")
    return seeds


def finetune_seeds_of(cfg: DictConfig) -> int:
    n = int(cfg.study.get("finetune_seeds", 1))
    if n < 1:
        raise ArmlmError(f"study.finetune_seeds={n}; fine-tune each checkpoint at least once")
    return n


def finetune_runs(name: str, seed: int, finetune_seeds: int) -> list[tuple[str, int]]:
    """(folder, seed) of each fine-tuning run of one task and variant. One run keeps the pretraining seed
    (and the plain <task>-<variant> folder); several get seeds 100 k + 1 .. 100 k + n for pretraining seed k,
    the same in every arm, so arms compare on the same fine-tuning seeds (paired), and the report takes
    their median per checkpoint, as the GLUE protocol does."""
    if finetune_seeds == 1:
        return [(name, seed)]
    return [(f"{name}{FINETUNE_SEED_SUFFIX}{j}", 100 * seed + j) for j in range(1, finetune_seeds + 1)]


def selected(cfg: DictConfig, arms: dict[str, Any]) -> dict[str, Any]:
    """The arms this launch runs: all, or the one `arm=` names."""
    if cfg.arm is None:
        return dict(arms)
    if cfg.arm not in arms:
        raise ArmlmError(f"arm={cfg.arm!r} is not in study {cfg.study.name}; its arms are {list(arms)}")
    return {cfg.arm: arms[cfg.arm]}


def pipeline_arms(cfg: DictConfig) -> dict[str, PipelineArm]:
    """The study's arms, parsed (studies.arms) and checked together (check_study), once per plan."""
    check_study_keys(cfg.study)
    arms = parse_arms(PipelineArm, OmegaConf.to_container(cfg.study.arms, resolve=True))
    check_study(cfg, arms)
    return arms


def _strings(values: Any) -> list[str]:
    return [str(v) for v in (values or [])]


# What the default planner reads of every study config (the rest is optional: study.get)
STUDY_KEYS = ("name", "arms", "tasks", "default_variants", "finetune_variants", "diagnose")


def check_study_keys(study: DictConfig) -> None:
    missing = [key for key in STUDY_KEYS if key not in study]
    if missing:
        raise ArmlmError(f"study {study.get('name', '?')!r} lacks {missing}; a study config gives {list(STUDY_KEYS)} "
                         "(configs/study/ar_vs_mlm.yaml is one to copy)")


def check_study(cfg: DictConfig, arms: dict[str, PipelineArm]) -> None:
    """Names that would only fail hours later, inside a stage, are checked up front (the findings' and checks' arms
    where the registrations are read: analysis.findings.registrations.StudySpec)."""
    study = cfg.study
    variants = study.finetune_variants
    for name, arm in arms.items():
        unknown = [v for v in (arm.finetune if arm.given("finetune") else study.default_variants) if v not in variants]
        if unknown:
            raise ArmlmError(f"arm {name}: fine-tuning variants {unknown} are not defined in "
                             f"study.finetune_variants ({list(variants)})")
        if arm.given("budget_scale") and not float(arm.budget_scale) > 0:
            raise ArmlmError(f"arm {name}: budget_scale must be > 0")
        if sum(arm.given(key) for key in ("pretrain", "from_arm", "model")) != 1 or (
                arm.given("checkpoint_fraction") and not arm.given("from_arm")):
            raise ArmlmError(f"arm {name}: an arm either pretrains (pretrain: [...]), reads another arm's "
                             "checkpoint (from_arm, with checkpoint_fraction for one part-way through its budget) or "
                             "reads a published model (model: <Hugging Face folder, hf:<id> or run>)")
        fraction = 0.5 if arm.checkpoint_fraction is None else arm.checkpoint_fraction
        if arm.given("from_arm") and (arm.from_arm not in arms or arms[arm.from_arm].from_arm
                                      or not 0 < float(fraction) < 1):
            raise ArmlmError(f"arm {name}: from_arm={arm.from_arm!r} must be a pretraining arm of this study and "
                             f"checkpoint_fraction={arm.checkpoint_fraction} in (0, 1)")
    check_branches(arms)
    reference = study.diagnose.candidates_arm
    if reference is not None and reference not in arms:
        raise ArmlmError(f"study.diagnose.candidates_arm={reference!r} is not one of the arms {list(arms)}")
    if study.diagnose.independence and reference is not None and arms[reference].diagnose is False:
        raise ArmlmError(f"arm {reference} is study.diagnose.candidates_arm, so it must be diagnosed: the "
                         "other arms score its candidate sets; drop its diagnose: false or pick another arm")
    finetune_seeds_of(cfg)
    check_budget(cfg, arms)


def corpus(cfg: DictConfig) -> str:
    """The data group a study's stages read: the study's own `corpus` where its design needs one (short documents
    for study=packing), else the scale's."""
    return str(cfg.study.get("corpus") or cfg.corpus)


def plan(cfg: DictConfig) -> list[Stage]:
    """Every stage of the selected arms and seeds, each arm x seed in pipeline order. An arm with `from_arm`
    pretrains nothing: it fine-tunes that arm's checkpoint saved at `checkpoint_fraction` of its budget."""
    arms = pipeline_arms(cfg)
    study = cfg.study
    at_words = milestone_words(cfg, arms)
    stages: list[Stage] = []
    for seed in seeds_of(cfg):
        for arm_name, arm in selected(cfg, arms).items():
            base = seed_folder(cfg, arm_name, seed)
            run = seed_folder(cfg, arm.from_arm or arm_name, seed) / "pretrain"  # the run this arm reads
            needs, pretrained = (run / done_file("pretrain"),), run
            if arm.given("checkpoint_fraction"):
                pretrained = run / "checkpoints" / f"tokens-{part_way_point(cfg, arm, arms)}.ckpt"
            reading = ([f"trust_remote_code={str(bool(arm.trust_remote_code)).lower()}"]
                       if arm.given("trust_remote_code") else [])
            if arm.given("model"):  # a published model: read as it is, nothing to wait for
                needs, pretrained = (), str(arm.model)
            elif not arm.from_arm:
                points = part_way_tokens(cfg, arm_name, arms)
                trunk = seed_folder(cfg, arm.branch_of or arm_name, seed) / "pretrain"
                stages.append(Stage("pretrain", arm_name, seed, "pretrain", run, tuple(
                    [*_strings(cfg.pretrain), f"data={corpus(cfg)}", *_strings(study.get("pretrain_settings")),
                     *_strings(arm.pretrain), f"seed={seed}", *budget_overrides(cfg, arm),
                     *([f"save_at_tokens={points}"] if points else []),
                     *([f"save_at_words=[{','.join(map(str, words))}]"] if (words := scored_milestones(
                         study, arm, at_words)) else []),
                     *trunk_overrides(arms, arm_name),
                     *branch_overrides(arm, trunk), *_strings(cfg.extra_pretrain)]),
                    needs=(trunk / done_file("pretrain"),) if arm.branch_of else ()))
            for task in cfg.tasks if cfg.tasks is not None else study.tasks:
                for variant in arm.finetune if arm.given("finetune") else study.default_variants:
                    for folder, finetune_seed in finetune_runs(f"{task}-{variant}", seed, finetune_seeds_of(cfg)):
                        stages.append(Stage("finetune", arm_name, seed, f"finetune {folder}",
                                            base / "finetune" / folder, tuple(
                            [f"task={task}", f"pretrained={pretrained}", f"seed={finetune_seed}", *reading,
                             *_strings(study.finetune_variants[variant]), *_strings(cfg.finetune),
                             *_strings(study.get("finetune_settings")),
                             *_strings((study.get("task_settings") or {}).get(task)), *_strings(cfg.extra_finetune)]),
                            needs=needs))
            # Pretraining arms are diagnosed unless they say not; an arm that reads another's checkpoint only
            # when it asks (diagnose: true), e.g. to score it in another context (diagnose_settings).
            if arm.diagnose if arm.given("diagnose") else not arm.from_arm:
                stages.append(diagnose_stage(cfg, arm_name, seed, base, pretrained, needs,
                                             [*reading, *_strings(arm.diagnose_settings)]))
            # Zero-shot scoring (`armlm zeroshot`, BLiMP), in a study that asks for it: every pretraining arm unless
            # it says not, with the study's settings then the arm's (e.g. the methods a finding reads).
            if scored_zero_shot(study, arm):
                settings = [*reading, *_strings(study.zeroshot.get("settings")), *_strings(arm.zeroshot_settings)]
                stages.append(Stage("zeroshot", arm_name, seed, "zeroshot", base / "zeroshot", tuple(
                    [f"checkpoint={pretrained}", f"seed={seed}", *settings]), needs=needs))
                # and at each word milestone its own pretraining saved (save_at_words above)
                for words in scored_milestones(study, arm, at_words):
                    name, checkpoint = milestone_name(words), run / "checkpoints" / WORDS_CHECKPOINT.format(words=words)
                    stages.append(Stage("zeroshot", arm_name, seed, f"zeroshot {name}", base / MILESTONES / name,
                                        tuple([f"checkpoint={checkpoint}", f"seed={seed}", *settings]), needs=needs))
    return stages


# the keys of a study config the default planner reads (STUDY_KEYS always, the rest where given; studies.budget's
# among them; "section.key" a section's own): studies.run refuses any other, which nothing would read
plan.study_settings = (*STUDY_KEYS, "corpus", "finetune_seeds", "finetune_settings", "pretrain_settings",
                       "task_settings", "zeroshot", "budget", "budget_kind", "unique_tokens",
                       "diagnose.candidates_arm", "diagnose.independence", "diagnose.representations",
                       "diagnose.settings", "zeroshot.at_words", "zeroshot.settings")


def milestone_words(cfg: DictConfig, arms: dict[str, PipelineArm]) -> list[int]:
    """The word milestones a study scores BLiMP at (`zeroshot.at_words`; empty: none), checked before any stage
    runs: a run counts its words from its own first step over packed blocks, so a branch (which starts part-way
    through its trunk) or a FLOPs budget (whose length is an estimate) cannot save them (training.validate)."""
    section = cfg.study.get("zeroshot")
    words = list(section.get("at_words") or []) if section is not None else []
    if any(not isinstance(w, int) or isinstance(w, bool) or w < 1 for w in words) or words != sorted(set(words)):
        raise ArmlmError(f"study.zeroshot.at_words={words}; give increasing word counts, e.g. [1_000_000, 2_000_000], "
                         "or leave it out")
    branches = [name for name, arm in arms.items() if arm.branch_of and scored_milestones(cfg.study, arm, words)]
    if words and (branches or budget_kind(cfg) == "flops"):
        why = f"arms {branches} branch off a trunk" if branches else "the budget is in FLOPs"
        raise ArmlmError(f"study.zeroshot.at_words cannot be honoured: {why}; score milestones in runs of their own "
                         "with a token budget, or leave at_words out")
    return words


def scored_zero_shot(study: DictConfig, arm: PipelineArm) -> bool:
    """In a study with a `zeroshot:` section, every pretraining arm is scored unless it says not; an arm that reads
    another's checkpoint only when it asks."""
    return study.get("zeroshot") is not None and (arm.zeroshot if arm.given("zeroshot") else not arm.from_arm)


def scored_milestones(study: DictConfig, arm: PipelineArm, at_words: list[int]) -> list[int]:
    """The milestones an arm saves and scores: every one, for an arm that pretrains and is scored zero-shot."""
    return at_words if arm.given("pretrain") and scored_zero_shot(study, arm) else []


def diagnose_stage(cfg: DictConfig, arm_name: str, seed: int, base: Path, checkpoint: Path | str,
                   run_done: tuple[Path, ...], arm_settings: list[str]) -> Stage:
    """Every arm but the reference one scores the reference arm's candidate sets (same seed), so the
    independence diagnostics of different checkpoints compare on the same K x K tables. `checkpoint` (a
    pretraining run folder or file, whose run writes `run_done`; or a published model, with nothing to wait for) and
    `arm_settings` (the arm's
    `diagnose_settings`, last) let an arm diagnose another arm's checkpoint another way."""
    diagnose = cfg.study.diagnose
    overrides = [f"checkpoint={checkpoint}", f"data={corpus(cfg)}", f"seed={seed}",
                 f"independence={str(bool(diagnose.independence)).lower()}",
                 f"representations.enabled={str(bool(diagnose.representations)).lower()}",
                 *_strings(cfg.diagnose), *_strings(diagnose.get("settings")), *_strings(arm_settings),
                 *_strings(cfg.extra_diagnose)]
    needs = list(run_done)
    reference = diagnose.candidates_arm
    if diagnose.independence and reference is not None and reference != arm_name:
        reference_folder = seed_folder(cfg, reference, seed) / "diagnostics"
        overrides.append(f"candidates_from={reference_folder / done_file('diagnose')}")
        needs.append(reference_folder / done_file("diagnose"))
    return Stage("diagnose", arm_name, seed, "diagnose", base / "diagnostics", tuple(overrides), tuple(needs))


def describe(cfg: DictConfig) -> dict[str, Any]:
    """The study's resolved settings, kept beside its runs."""
    return OmegaConf.to_container(cfg, resolve=True)
