"""Pretraining: one run of an objective on the shared backbone, from a composed `train` config to its run folder
(checkpoints, TensorBoard logs, summary.json). `armlm train` and `python train.py` run `pretrain`."""

from __future__ import annotations

import logging
import math
import time
import warnings
from dataclasses import asdict
from pathlib import Path
from typing import Any

import lightning as L
from omegaconf import DictConfig, OmegaConf

from armlm.common.babylm import milestone_name
from armlm.common.errors import ArmlmError
from armlm.common.machine import keep_large_allocations_on_the_heap
from armlm.common.migrations import SCHEMA_VERSION
from armlm.datamodules.pretrain import PretrainDataModule
from armlm.models.backbone import ModelConfig
from armlm.training.branches import branch_checkpoint, branch_record, trunk_points
from armlm.training.budget import FLOPS_STEP_MARGIN, step_flops_estimate, steps_for_tokens, tokens_of_passes
from armlm.training.callbacks import DataPosition, FirstStep, SaveAtSteps, SaveAtTokens, TokenAccounting
from armlm.training.compiled import datasheet_peak
from armlm.training.devices import check_machine
from armlm.training.disk_full import reporting_full_disk
from armlm.training.init_from import lineage_tokens, load_parent_backbone, parent_lineage
from armlm.training.lit_module import OWN_ALL, PretrainModule
from armlm.training.milestones import save_at_words
from armlm.training.preflight import check_config, check_resumable
from armlm.training.run_folder import refuse_writing_over_a_run, resolve_last_checkpoint
from armlm.training.setup import build, choose_cpu_precision, command_line_overrides
from armlm.training.step_config import attention_kernels, step_settings, use_matmul_precision
from armlm.training.trainer import build_trainer, checkpoints, quiet_lightning, write_result

log = logging.getLogger("armlm.train")
OWN_MARGIN = "val/own_below_unigram"  # its tags: this, and this_<scope> for a mixture's components
# Lightning warns that a mid-epoch resume replays data unless the loader has a state_dict; armlm's sampler
# continues after the checkpoint's batches by itself (datamodules.sampler, tests/test_resume.py).
warnings.filterwarnings("ignore", message="You're resuming from a checkpoint that ended before the epoch ended")
# nonfinite_loss=skip returns None from training_step on purpose (and logs the skip itself).
warnings.filterwarnings("ignore", message="`training_step` returned `None`")


def run_pretraining(cfg: DictConfig) -> dict[str, Any]:
    """Train one run and return its summary (also written to <run folder>/summary.json)."""
    started = time.perf_counter()
    objective, model_config = check_config(cfg)
    check_machine(cfg)
    choose_cpu_precision(cfg)
    out = Path(cfg.output_dir)
    L.seed_everything(cfg.seed, workers=True)

    step = step_settings(cfg.trainer)
    use_matmul_precision(cfg.trainer)
    datamodule = build(cfg.data, input_format=objective.input_format, seed=cfg.seed)
    datamodule.use_loaders(workers=max(datamodule.num_workers, step["loader_workers"]), pin_memory=step["pin_memory"])
    datamodule.setup("fit")  # builds any missing cache; the tokenizer decides the vocabulary size
    model_config.vocab_size = datamodule.vocabulary.size
    lineage, parent = (parent_lineage(cfg.init_from, model_config, datamodule.tokenizer_json)
                       if cfg.get("init_from") else ([], None))
    module = PretrainModule(
        model=asdict(model_config),
        objective=OmegaConf.to_container(cfg.objective, resolve=True),
        optim=OmegaConf.to_container(cfg.optim, resolve=True),
        seed=cfg.seed,
        compile_step={"mode": step["compile_mode"], "backend": step["compile_backend"]} if step["compile"] else None,
        nonfinite_loss=cfg.nonfinite_loss,
        built_objective=objective,
        init_from=lineage or None,
    )
    if parent is not None and not cfg.ckpt_path:  # a resumed continuation has its own weights in its checkpoint
        load_parent_backbone(module.model, parent)
        log.info("continuing from %s (%s, %d input tokens; %d in its whole chain)", parent, lineage[-1]["objective"],
                 lineage[-1]["tokens"], lineage_tokens(lineage))
    max_flops = cfg.get("max_flops")
    tokens = TokenAccounting(cfg.max_tokens, None if max_flops is None else float(max_flops))  # data_epochs: below
    best, last = checkpoints(out, best_by="val/loss")
    part_way = SaveAtTokens(tokens, list(cfg.get("save_at_tokens") or []), out / "checkpoints")
    branch_points = SaveAtSteps([], out / "checkpoints")  # a trunk's branches' decay starts (branch_start)
    first_step = FirstStep(started)
    trainer = build_trainer(cfg.trainer, out, [DataPosition(), tokens, part_way, branch_points, best, last,
                                               first_step],
                            cfg.get("logger"))
    flops_per_step_estimate = set_budget_steps(cfg, trainer, module, datamodule, tokens)
    refuse_points_past_the_end(part_way.points, trainer, datamodule)
    milestones = save_at_words(cfg, trainer, datamodule, tokens, module.budget_tokens, out / "checkpoints")
    resume_from, branched_from = start_of_branch(cfg, trainer, datamodule, model_config, branch_points)
    module.peak_flops = step["mfu_peak_flops"] or datasheet_peak(trainer.strategy.root_device)
    module.fused_adamw = step["fused_adamw"]
    log_plan(cfg, trainer, module, datamodule, tokens, flops_per_step_estimate, out)
    fit_started = time.perf_counter()
    with attention_kernels(cfg.trainer):
        trainer.fit(module, datamodule=datamodule, ckpt_path=resume_from)
    fit_seconds = time.perf_counter() - fit_started

    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    epochs = tokens.tokens_seen / datamodule.epoch_positions(trainer.world_size)
    summary = {
        "schema_version": SCHEMA_VERSION,
        "objective": type(module.objective).__name__,
        "steps": trainer.global_step,
        "tokens_seen": tokens.tokens_seen,
        "pred_tokens_seen": tokens.pred_tokens_seen,
        # a continued run (init_from=): its ancestors, oldest first, and the input tokens of the whole chain
        "init_from": lineage,
        "chain_tokens_seen": lineage_tokens(lineage) + tokens.tokens_seen,
        # a cooldown branch (branch_from=): the trunk run and the checkpoint it resumed from; its steps and tokens
        # count from the trunk's start, its wall time only its own
        "branch_from": branched_from,
        # where the objective's schedule puts its changes (a phased objective's phase starts: round(until x
        # budget)), and where each phase's first batch began, as measured (the first batch boundary at or after its
        # mark; None: resumed from a checkpoint that predates the record), in input tokens
        "budget_marks": module.objective.budget_marks(module.budget_tokens) if module.budget_tokens else {},
        "phase_starts": tokens.phase_starts,
        "flops_seen": tokens.flops_seen,  # training matmul FLOPs (models.flops), validation not counted
        # a FLOPs budget's estimate of one step's training FLOPs, which set the schedule's length (else None)
        "flops_per_step_estimate": flops_per_step_estimate,
        # the unique training tokens (data.max_train_tokens, or the whole train split) and the passes over them
        "train_tokens": datamodule.train_tokens,
        "epochs": epochs,
        # the budget in words, as BabyLM counts it: whitespace words of that text, times the passes over it (None
        # for a token cache written before its manifest counted words)
        "train_words": datamodule.train_words,
        "words_seen": None if datamodule.train_words is None else epochs * datamodule.train_words,
        # the word milestones saved (checkpoints/words-<W>.ckpt), by name, with the input tokens of each
        "word_milestones": {} if milestones is None else {milestone_name(w): n for w, n in milestones.written().items()},
        "max_train_tokens": datamodule.max_train_tokens,  # a data-constrained run's slice (None: the whole split)
        "val_loss": metrics.get("val/loss"),
        # next_token (AR) or masked_token (MLM): different quantities, never one column (docs/guides/pretraining.md, "What is logged")
        "val_loss_kind": module.objective.val_loss_kind,
        "val_ppl": metrics.get("val/ppl"),
        # NLL per target token, exact (AR) or a bound (masked diffusion), comparable across those objectives;
        # None for an objective that logs none (Objective.likelihood_metric)
        "val_likelihood": metrics.get(f"val/{module.objective.likelihood_metric}")
        if module.objective.likelihood_metric else None,
        # the validation tag behind val_likelihood, whose curve a study reads (analysis.findings.measures, past_exit)
        "val_likelihood_tag": f"val/{module.objective.likelihood_metric}" if module.objective.likelihood_metric else None,
        "unigram_baseline": datamodule.unigram_baseline,
        # The learning gate's quantity, the arm read as it is used (PretrainModule.log_own_margins): the unigram NLL
        # of exactly the held-out targets its own loss scored, minus that loss; "all", and a mixture's components
        "own_below_unigram": {tag.removeprefix(OWN_MARGIN).lstrip("_") or OWN_ALL: value
                              for tag, value in metrics.items() if tag.startswith(OWN_MARGIN)},
        # whether the final held-out loss is below its own unigram baseline (a study starts no stage on a run that
        # did not, unless allow_unlearned=true); None: no validation to tell
        "learned": learned(metrics),
        # what own_below_unigram's "all" is a margin of: the objective's own loss (val/<own_loss_metric>) below
        # val/own_unigram, the unigram NLL of its targets or a baseline of its own (own_baseline_kind)
        "own_loss_metric": module.objective.own_loss_metric,
        "own_baseline_kind": module.objective.own_baseline_kind,
        "wall_seconds": round(time.perf_counter() - started, 1),
        # The training loop alone (steps, logging, validation, checkpoints), without data preparation:
        # bench/loop.py sets its tokens/s against the bare step's.
        "fit_seconds": round(fit_seconds, 2),
        # the fit's training FLOPs per second over the devices' peak (trainer.step.mfu_peak_flops, else the GPU's
        # data sheet; None on a CPU), validation and checkpoints inside the time; and the start-up to the first step
        "mfu": (tokens.flops_seen / fit_seconds / (module.peak_flops * trainer.world_size)
                if module.peak_flops and fit_seconds > 0 else None),
        "startup_seconds": None if first_step.seconds is None else round(first_step.seconds, 1),
        "best_checkpoint": best.best_model_path,
        "last_checkpoint": last.path,
        "metrics": metrics,
    }
    write_result(trainer, out / "summary.json", summary)
    if summary["learned"] is False:
        log.warning("this run did not learn: its own held-out loss is not below its unigram baseline (%s = %.3f "
                    "nats); summary.json says learned: false, and a study starts no stage on it. See train/grad_norm "
                    "and train/loss in %s", OWN_MARGIN, metrics[OWN_MARGIN], out)
    log.info("done: val/loss %s (unigram baseline %.3f), val/ppl %s, %d steps, %d input tokens, %.0f s; run folder %s",
             rounded(summary["val_loss"], 4), datamodule.unigram_baseline, rounded(summary["val_ppl"], 1), summary["steps"],
             summary["tokens_seen"], summary["wall_seconds"], out)
    return summary


def learned(metrics: dict[str, float]) -> bool | None:
    """Whether the held-out loss ended below its own unigram baseline (val/own_below_unigram > 0: the unigram NLL of
    exactly the targets its own loss scored, or an objective's own baseline, minus that loss); None without one."""
    margin = metrics.get(OWN_MARGIN)
    return None if margin is None or math.isnan(margin) else margin > 0


def sequences_in_a_step(trainer: L.Trainer, datamodule: PretrainDataModule) -> int:
    """The sequences one optimiser step trains on: every rank's batches, accumulation included."""
    return datamodule.batch_size * trainer.world_size * trainer.accumulate_grad_batches


def refuse_points_past_the_end(points: list[int], trainer: L.Trainer, datamodule: PretrainDataModule) -> None:
    """A save_at_tokens point past the input tokens of the run's last step (its step cap: trainer.max_steps, or the
    budget's steps) would never be written; the run ended without it and without a word."""
    cap = trainer.fit_loop.epoch_loop.max_steps
    most = cap * sequences_in_a_step(trainer, datamodule) * datamodule.block_size
    beyond = [n for n in points if cap > 0 and n > most]
    if beyond:
        raise ArmlmError(f"save_at_tokens={points}: {beyond[0]} input tokens is past this run's end, {cap} steps of "
                         f"{most // cap} input tokens ({most} in all); give points below that, or a longer run")


def set_budget_steps(cfg: DictConfig, trainer: L.Trainer, module: PretrainModule,
                     datamodule: PretrainDataModule, tokens: TokenAccounting) -> float | None:
    """Make the learning-rate schedule span the steps the budget takes (or trainer.max_steps, if that comes
    first). TokenAccounting stops the run at the budget exactly; a FLOPs budget's steps are an estimate, so the
    step cap sits past it (training.budget). A budget in passes over the data (data_epochs) becomes the input
    tokens of that many passes, as the loader gives them. Returns a FLOPs budget's estimate of one step's
    training FLOPs (None for the other budgets)."""
    sequences_per_step = sequences_in_a_step(trainer, datamodule)
    cap = trainer.max_steps if trainer.max_steps > 0 else math.inf
    if cfg.get("data_epochs"):
        tokens.max_tokens = tokens_of_passes(cfg.data_epochs, datamodule.epoch_positions(trainer.world_size))
    if tokens.max_tokens:
        steps = steps_for_tokens(tokens.max_tokens, sequences_per_step * datamodule.block_size)
        trainer.fit_loop.epoch_loop.max_steps = min(steps, cap)
        module.budget_tokens = int(tokens.max_tokens)
    elif not cfg.get("max_flops") and cap < math.inf:  # a step budget: the positions its steps hold
        module.budget_tokens = int(cap * sequences_per_step * datamodule.block_size)
    elif cfg.get("max_flops"):
        module.objective.set_vocabulary(datamodule.vocabulary)
        # Under the trainer's precision: bf16 on a CPU attends with another kernel (models.attention), counted apart.
        with trainer.precision_plugin.forward_context():
            per_step = step_flops_estimate(module.objective, module.model, datamodule.val_dataloader(),
                                           sequences_per_step, cfg.seed)
        if float(cfg.max_flops) < per_step:
            raise ArmlmError(f"max_flops={float(cfg.max_flops):g} is less than one training step ({per_step:.3g} "
                             "FLOPs here); give the budget in training FLOPs (README, 'Budgets')")
        steps = math.ceil(float(cfg.max_flops) / per_step)
        module.schedule_steps = min(steps, cap)
        trainer.fit_loop.epoch_loop.max_steps = min(math.ceil(steps * FLOPS_STEP_MARGIN) + 1, cap)
        log.info("FLOPs budget %.3g: about %.3g training FLOPs per step, so about %d steps", float(cfg.max_flops),
                 per_step, steps)
        return per_step
    return None


def start_of_branch(cfg: DictConfig, trainer: L.Trainer, datamodule: PretrainDataModule, model_config: ModelConfig,
                    branch_points: SaveAtSteps) -> tuple[str | None, dict[str, Any] | None]:
    """Where fit() starts (training.branches): a trunk saves its branches' decay starts; a branch resumes from the
    trunk's checkpoint at its own decay start, unless it is itself being resumed (ckpt_path). Returns (the
    checkpoint to resume from, the branch record for summary.json)."""
    tokens_per_step = sequences_in_a_step(trainer, datamodule) * datamodule.block_size
    if cfg.get("branch_budgets"):
        branch_points.steps = set(trunk_points(cfg, datamodule.epoch_positions(trainer.world_size), tokens_per_step))
    if not cfg.get("branch_from"):
        return cfg.ckpt_path, None
    trunk_checkpoint, trunk_tokens = branch_checkpoint(cfg, trainer.fit_loop.epoch_loop.max_steps)
    check_resumable(trunk_checkpoint, model_config, OmegaConf.to_container(cfg.objective, resolve=True))
    return cfg.ckpt_path or str(trunk_checkpoint), branch_record(cfg, trunk_checkpoint, trunk_tokens)


def rounded(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def log_plan(cfg: DictConfig, trainer: L.Trainer, module: PretrainModule, datamodule: PretrainDataModule,
             tokens: TokenAccounting, flops_per_step: float | None, out: Path) -> None:
    """One line before training: the model, the objective, the budget and its steps, the training FLOPs a step
    costs (armlm's count, models.flops; Lightning's summary cannot count them), and the run folder."""
    sequences = sequences_in_a_step(trainer, datamodule)
    if flops_per_step is None:
        module.objective.set_vocabulary(datamodule.vocabulary)
        with trainer.precision_plugin.forward_context():
            flops_per_step = step_flops_estimate(module.objective, module.model, datamodule.val_dataloader(),
                                                 sequences, cfg.seed, batches=1)
    steps = trainer.fit_loop.epoch_loop.max_steps
    planned = steps if steps > 0 else "unbounded"
    if module.schedule_steps and 0 < module.schedule_steps < steps:  # a FLOPs budget: its count ends the run
        planned = f"about {module.schedule_steps} (a cap of {steps})"
    budget = (f"{tokens.max_tokens:,} input tokens" if tokens.max_tokens else
              f"{float(cfg.max_flops):.3g} training FLOPs" if cfg.get("max_flops") else "the trainer's step cap")
    config = module.model.config
    log.info("model: %.2fM parameters (%d layers, d_model %d); objective %s; budget %s: %s steps of %d x %d tokens, "
             "about %.3g training FLOPs each; run folder %s", module.model.num_parameters() / 1e6, config.n_layers,
             config.d_model, type(module.objective).__name__, budget, planned, sequences,
             datamodule.block_size, flops_per_step, out)


def pretrain(cfg: DictConfig) -> dict[str, Any]:
    """`armlm train ...`: the run, with a full disk reported as what to free and how to resume."""
    keep_large_allocations_on_the_heap()
    quiet_lightning()
    resolve_last_checkpoint(cfg)
    refuse_writing_over_a_run(cfg, "summary.json")
    return reporting_full_disk(run_pretraining, cfg, command_line_overrides())
