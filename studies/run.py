"""A study: every arm x seed pretrained, fine-tuned and diagnosed, each stage its own run, then the study's report
(tables and figures under <root>/report). `armlm study ...` (or `armlm study ...`) runs `study`.

    armlm study study=ar_vs_mlm scale=smoke seeds=1          # minutes on a CPU
    armlm study study=ar_vs_mlm dry_run=true                 # list the stages and their commands
    armlm study -m study=ar_vs_mlm arm=ar,mlm seed=1,2,3 hydra/launcher=joblib hydra.launcher.n_jobs=4

Rerunning the same command skips stages whose results file exists and resumes interrupted ones from their last
checkpoint. With record=<folder> (committed beside the code), every finished unit's results are kept there and a
fresh machine restores them instead of redoing them (studies/keeping.py). configs/study.yaml lists the settings,
docs/guides/studies.md the cluster recipes.
"""

from __future__ import annotations

import json
import logging
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from armlm.analysis.findings.registrations import StudySpec
from armlm.analysis.reports.findings_report import write_findings
from armlm.common.atomic import atomic_write_text
from armlm.common.commands import resolve
from armlm.common.errors import ArmlmError
from armlm.common.rules import NUMBER, Rule, any_value, check_closed, check_rules
from armlm.studies.keeping import record_finished, restore_recorded
from armlm.studies.plan import Stage, describe
from armlm.studies.runner import Outcome, check_root, run_stages
from armlm.studies.stages import STAGE_KINDS

log = logging.getLogger("armlm.study")


def summarise(outcomes: list[Outcome]) -> str:
    lines = [f"{o.stage.name:<48} {o.status:<8} {o.seconds:>8.0f} s  {o.detail}" for o in outcomes]
    counts = Counter(o.status for o in outcomes)
    return "\n".join([*lines, "stages: " + ", ".join(f"{n} {status}" for status, n in counts.items())])


def keep_finished(stages: list, root: Path, record: Path) -> None:
    """Keep finished units; a failure to keep one (a full disk, a broken event file) is reported, and the study
    goes on: its root still holds every result."""
    try:
        record_finished(stages, root, record)
    except (OSError, ValueError) as err:
        log.warning("record: could not keep finished units in %s (%s); rerun the same command to try again", record,
                    err)


def write_study_report(cfg: DictConfig, root: Path, spec: StudySpec) -> None:
    written = study_function(cfg, "report", "armlm.analysis.reports.study_report:write_report")(root)
    if spec.findings:
        written += write_findings(root, spec)
    log.info("report: %s", ", ".join(str(p) for p in written))


def of_kinds(stages: list[Stage], kinds: Any) -> list[Stage]:
    """The stages of the kinds asked for (study.yaml's `stages`; None: every kind), e.g. only pretraining and
    fine-tuning for the seeds a fine-tuning finding alone needs."""
    if kinds is None:
        return stages
    unknown = sorted(set(kinds) - set(STAGE_KINDS))
    if unknown or not kinds:
        raise ArmlmError(f"stages={list(kinds)}; choose some of {list(STAGE_KINDS)} (null: every kind)")
    return [stage for stage in stages if stage.kind in set(kinds)]


def study_function(cfg: DictConfig, key: str, default: str) -> Callable[..., Any]:
    """A study's own planner or report, named "module:function" as every armlm registry names code; its default
    where it names none."""
    reference = str(cfg.study.get(key) or default)
    if ":" not in reference:
        module, _, name = reference.rpartition(".")
        raise ArmlmError(f"study.{key}={reference!r} names no function (no ':'); name it as module:function "
                         f"({module}:{name}?)")
    try:
        return resolve(reference)
    except (ImportError, AttributeError) as err:
        raise ArmlmError(f"study.{key}={reference!r} names no function ({err}); name it as module:function") from err


# the keys of a study config the run itself reads, beside its registrations' (StudySpec.SETTINGS) and its planner's
RUN_SETTINGS = ("name", "planner", "report")
# the command's settings that only a planner which declares them reads (its `launch_settings`)
PLANNER_LAUNCH_SETTINGS = ("checkpoints_from",)
DEFAULT_PLANNER = "armlm.studies.plan:plan"


def unapplied_settings(cfg: DictConfig) -> dict[str, str]:
    """The launch's settings its study's planner does not read (common.unapplied): checkpoints_from= given to a study
    other than one that reads another's checkpoints changed nothing. A planner of one's own that declares no
    `study_settings` reads what it reads, unchecked."""
    planner = study_function(cfg, "planner", DEFAULT_PLANNER)
    if getattr(planner, "study_settings", None) is None:
        return {}
    reads = getattr(planner, "launch_settings", ())
    return {key: f"study={cfg.study.name}'s planner reads no {key}" for key in PLANNER_LAUNCH_SETTINGS if key not in reads}


def check_study_settings(cfg: DictConfig, planner: Callable[..., Any]) -> None:
    """A study config holds only keys something reads: the run's, its registrations' and its planner's (the planner's
    `study_settings`, "section.key" for a section's own; a planner of one's own that declares none reads what it
    reads, unchecked). A typo there (+study.alpa=0.01, or `aplha:` in a study's YAML) judged every finding at the
    default alpha without a word."""
    own = getattr(planner, "study_settings", None)
    if own is None:
        return
    keys = (*RUN_SETTINGS, *StudySpec.SETTINGS, *own)
    closed = {"study": list(dict.fromkeys(key.partition(".")[0] for key in keys))}
    for section, _, name in (key.partition(".") for key in keys if "." in key):
        closed.setdefault(f"study.{section}", []).append(name)
    check_closed(cfg, closed)


def registrations(cfg: DictConfig) -> StudySpec:
    """What the study registers (findings, their arms, checks, gate), parsed and checked once, before any stage runs
    (analysis.findings.registrations.StudySpec); the planner parses its arms (studies.arms)."""
    return StudySpec.parse(OmegaConf.to_container(cfg.study, resolve=True))


# Types here; ranges where the planner reads them (seeds_of, study_budget), with the study's context
STUDY_RULES = (
    Rule("seeds", (int,), any_value, "an integer >= 1, or null (3)", optional=True),
    Rule("first_seed", (int,), any_value, "an integer >= 1, or null (1)", optional=True),
    Rule("seed", (int,), any_value, "an integer >= 1, or null (every seed)", optional=True),
    Rule("budget", NUMBER, any_value, "a positive number (input tokens, or training FLOPs where the study counts "
         "them)", optional=True),
    Rule("replication", (bool,), any_value, "true or false"),
    Rule("allow_unlearned", (bool,), any_value, "true or false"),
    Rule("dry_run", (bool,), any_value, "true or false"),
)


def run_study(cfg: DictConfig) -> list[Outcome]:
    check_rules(cfg, STUDY_RULES)
    root = Path(cfg.root)
    check_root(root)
    if cfg.report not in (True, False, "only"):
        raise ArmlmError(f"report={cfg.report!r}; choose true (after the stages), false, or only (now, running none)")
    # A study config may bring its own stage plan and report (the embeddings study); the default is the
    # pretrain -> fine-tune -> diagnose pipeline and its report.
    planner = study_function(cfg, "planner", DEFAULT_PLANNER)
    check_study_settings(cfg, planner)
    spec = registrations(cfg)  # registrations, their arms, the gate: before any stage
    stages = of_kinds(planner(cfg), cfg.get("stages"))
    whole = cfg.arm is None and cfg.seed is None and cfg.get("stages") is None
    log.info("study %s in %s: %d stages", cfg.study.name, root, len(stages))
    prefix = {kind: [str(p) for p in (cfg.launch_prefix.get(kind) or [])] for kind in STAGE_KINDS}
    record = Path(cfg.record) if cfg.get("record") else None
    if record is not None and record.exists() and not record.is_dir():
        raise ArmlmError(f"record={record} is a file; give a folder for the study's record (a new one, or one an "
                         "earlier record= wrote)")
    restored: set = set()
    on_done = None
    if record is not None and not cfg.dry_run:
        every_arm = cfg.copy()
        every_arm.arm = None  # a record keeps and restores whole units, whichever arms this launch runs
        # ... of the kinds of stage it runs: seeds run for a fine-tuning finding alone ('stages=[pretrain,finetune]')
        # have no diagnostics to wait for, and are kept once pretrained and fine-tuned
        planned = of_kinds(planner(every_arm), cfg.get("stages"))
        restored = restore_recorded(planned, root, record)
        keep_finished(planned, root, record)  # units finished before record= was given
        on_done = lambda _: keep_finished(planned, root, record)  # noqa: E731
    if cfg.report == "only":  # the report over what the root holds now (and the record restored): no stage runs
        write_study_report(cfg, root, spec)
        return []
    outcomes = run_stages(stages, prefix, dry_run=cfg.dry_run, on_done=on_done, launcher=str(cfg.launcher),
                          allow_unlearned=bool(cfg.allow_unlearned))
    outcomes = [replace(o, status="restored", detail=f"from {record}") if o.stage in restored else o
                for o in outcomes]
    log.info("\n%s", summarise(outcomes))
    if cfg.dry_run:
        return outcomes
    if whole:
        statuses = [{"stage": o.stage.name, "kind": o.stage.kind, "arm": o.stage.arm, "seed": o.stage.seed,
                     "folder": str(o.stage.folder), "status": o.status, "seconds": o.seconds, "detail": o.detail}
                    for o in outcomes]
        atomic_write_text(root / "study.json", json.dumps({"settings": describe(cfg), "stages": statuses}, indent=2))
        if cfg.report:
            write_study_report(cfg, root, spec)
    elif any(o.status == "waiting" for o in outcomes):
        log.info("waiting stages read other arms' or seeds' results: rerun without arm=/seed= once those are done")
    return outcomes


def study(cfg: DictConfig) -> list[Outcome]:
    """`armlm study ...`: exit status 1 when a stage failed, 130 when interrupted (finished stages are kept)."""
    try:
        outcomes = run_study(cfg)
    except KeyboardInterrupt:
        log.error("interrupted: rerun the same command to resume (finished stages are kept)")
        sys.exit(130)
    if any(o.status in ("failed", "refused") for o in outcomes):
        sys.exit(1)
    return outcomes
