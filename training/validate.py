"""Start-up checks of the run-level settings of pretraining and fine-tuning runs: types, ranges and combinations
that would otherwise fail deep inside Lightning or after minutes of data processing.

Each setting is checked in one place. The run's own numbers (seed, budgets, data sizes, optimiser, trainer, task
and fine-tuning numbers) are checked here, before anything is built, and the classes that take them trust them.
Model, objective, tokenizer and fine-tuning-mode settings are checked by their own classes (ModelConfig, the
objectives, TokenizerSettings, FinetuneModule) when built, which also happens before any data is read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from armlm.common.errors import ArmlmError, ArmlmFileError
from armlm.common.rules import (
    NUMBER,
    Rule,
    above,
    any_value,
    at_least,
    check_closed,
    check_rules,
    closed_keys,
    count_or_share,
    one_of,
)
from armlm.datamodules.conll import WORD_SUBWORDS
from armlm.models.heads import POOLINGS
from armlm.training.compiled import COMPILE_MODES

BUDGETS = ("max_tokens", "max_flops", "data_epochs")  # input tokens, training FLOPs, passes over the data
NONFINITE_LOSS = ("stop", "skip")
COMPILE_BACKENDS = ("inductor", "aot_eager", "eager")
MATMUL_PRECISIONS = ("highest", "high", "medium")  # torch.set_float32_matmul_precision's
# every run sets torch's precision from it (training.step_config.use_matmul_precision): pretraining and fine-tuning
MATMUL_PRECISION = Rule("trainer.step.matmul_precision", (str,), one_of(*MATMUL_PRECISIONS),
                        f"one of {MATMUL_PRECISIONS}")
# Lightning's Trainer(precision=...) values (tests/test_configs.py holds them to lightning's own list): a misspelt one
# was Hydra's nine-line InstantiationException, after fine-tuning had encoded its data
PRECISIONS = ("32-true", "bf16-mixed", "16-mixed", "bf16-true", "16-true", "64-true", "transformer-engine",
              "transformer-engine-float16", "32", "16", "64", "bf16", 32, 16, 64)
PRECISION = Rule("trainer.precision", (str, int), one_of(*PRECISIONS), f"one of {PRECISIONS[:6]} (Lightning's), or null",
                 optional=True)  # null: Lightning's default, 32-true
RULES = (
    Rule("nonfinite_loss", (str,), one_of(*NONFINITE_LOSS), f"one of {NONFINITE_LOSS}"),
    Rule("seed", (int,), at_least(0), "an integer >= 0"),
    Rule("max_tokens", (int,), above(0), "a positive integer (input tokens), or null", optional=True),
    Rule("max_flops", NUMBER, above(0), "a positive number of training FLOPs (e.g. 3e13), or null", optional=True),
    Rule("data_epochs", NUMBER, above(0), "a positive number of passes over the training data, or null",
         optional=True),
    Rule("data.block_size", (int,), at_least(8), "an integer >= 8"),
    Rule("data.batch_size", (int,), at_least(1), "an integer >= 1"),
    Rule("data.num_workers", (int,), at_least(0), "an integer >= 0"),
    Rule("trainer.step.compile", (bool,), lambda v: True, "true or false", optional=True),
    Rule("trainer.step.compile_mode", (str,), one_of(*COMPILE_MODES), f"one of {COMPILE_MODES}", optional=True),
    Rule("trainer.step.compile_backend", (str,), one_of(*COMPILE_BACKENDS), f"one of {COMPILE_BACKENDS}",
         optional=True),
    MATMUL_PRECISION,
    PRECISION,
    Rule("trainer.step.loader_workers", (int,), at_least(0), "an integer >= 0", optional=True),
    Rule("trainer.step.pin_memory", (bool,), lambda v: True, "true or false", optional=True),
    Rule("trainer.step.fused_adamw", (bool,), lambda v: v is False, "false, or null (fused where torch has it)",
         optional=True),
    Rule("trainer.step.mfu_peak_flops", NUMBER, above(0), "a positive FLOP/s per device (e.g. 989e12), or null",
         optional=True),
    Rule("optim.lr", NUMBER, above(0), "a number > 0"),
    Rule("optim.weight_decay", NUMBER, at_least(0), "a number >= 0"),
    Rule("optim.eps", NUMBER, above(0), "a number > 0"),
    Rule("optim.warmup_steps", (int,), at_least(0), "an integer >= 0"),
    Rule("optim.min_lr_ratio", NUMBER, lambda v: 0 <= v <= 1, "a number in [0, 1]"),
    Rule("optim.decay_fraction", NUMBER, lambda v: 0 < v <= 1, "a number in (0, 1], or null", optional=True),
    Rule("trainer.max_steps", (int,), lambda v: v == -1 or v > 0, "a positive integer, or -1 for none"),
    Rule("trainer.max_epochs", (int,), lambda v: v == -1 or v > 0, "a positive integer, or -1 for none"),
    Rule("trainer.log_every_n_steps", (int,), at_least(1), "an integer >= 1"),
    Rule("trainer.accumulate_grad_batches", (int,), at_least(1), "an integer >= 1"),
    Rule("trainer.gradient_clip_val", NUMBER, at_least(0), "a number >= 0, or null", optional=True),
    Rule("trainer.val_check_interval", NUMBER, lambda v: v >= 1 if isinstance(v, int) else 0 < v <= 1,
         "a number of batches (integer >= 1) or a fraction of an epoch in (0, 1]"),
    Rule("trainer.limit_val_batches", NUMBER, count_or_share, "a number of batches or a fraction in [0, 1]"),
)


FINETUNE_RULES = (
    Rule("seed", (int,), at_least(0), "an integer >= 0"),
    # trust_remote_code=maybe was true to Python, and a Hugging Face folder's own code ran without a true
    Rule("trust_remote_code", (bool,), any_value, "true or false", optional=True),
    Rule("task.epochs", (int,), at_least(1), "an integer >= 1"),
    Rule("task.data.max_length", (int,), at_least(4), "an integer >= 4"),
    Rule("task.data.batch_size", (int,), at_least(1), "an integer >= 1"),
    Rule("task.data.eval_batch_size", (int,), at_least(1), "an integer >= 1"),
    Rule("task.data.max_train_examples", (int,), at_least(1), "an integer >= 1, or null", optional=True),
    Rule("task.data.max_eval_examples", (int,), at_least(1), "an integer >= 1, or null", optional=True),
    Rule("task.data.num_workers", (int,), at_least(0), "an integer >= 0"),
    Rule("task.optim.lr", NUMBER, above(0), "a number > 0"),
    Rule("task.optim.features_lr", NUMBER, above(0), "a number > 0"),
    Rule("task.optim.mix_lr", NUMBER, above(0), "a number > 0, or null (the head's rate)", optional=True),
    Rule("task.optim.weight_decay", NUMBER, at_least(0), "a number >= 0"),
    Rule("task.optim.warmup_ratio", NUMBER, lambda v: 0 <= v < 1, "a number in [0, 1)"),
    Rule("task.optim.eps", NUMBER, above(0), "a number > 0"),
    Rule("finetune.dropout", NUMBER, lambda v: 0 <= v < 1, "a number in [0, 1)"),
    Rule("finetune.feature_layers", (int,), at_least(1), "an integer >= 1"),
    Rule("finetune.features", (str,), lambda v: v in ("concat", "scalar_mix"), "concat or scalar_mix"),
    # before the data is encoded; auto is the state that sees the whole input (or word) in the attention fine-tuned
    Rule("finetune.pooling", (str,), one_of("auto", *POOLINGS), f"auto or one of {POOLINGS}"),
    Rule("finetune.word_subword", (str,), one_of("auto", *WORD_SUBWORDS), f"auto or one of {WORD_SUBWORDS}"),
    # the step settings fine-tuning does not apply (configs/finetune.yaml fixes them over the trainer's)
    Rule("trainer.step.compile", (bool,), lambda v: v is False, "false: fine-tuning runs eager (the compiled step "
         "is pretraining's)"),
    Rule("trainer.step.loader_workers", (int,), lambda v: v == 0, "0: fine-tuning's loaders take task.data.num_workers "
         "workers"),
    Rule("trainer.step.pin_memory", (bool,), lambda v: v is False, "false: fine-tuning's loaders do not pin memory"),
    Rule("trainer.step.mfu_peak_flops", (), lambda v: False, "null: fine-tuning logs no train/mfu", optional=True),
    MATMUL_PRECISION,
    PRECISION,
    Rule("trainer.max_steps", (int,), lambda v: v == -1 or v > 0, "a positive integer (stops before task.epochs "
         "end), or -1 for none"),
    Rule("trainer.log_every_n_steps", (int,), at_least(1), "an integer >= 1"),
    Rule("trainer.accumulate_grad_batches", (int,), at_least(1), "an integer >= 1"),
    Rule("trainer.gradient_clip_val", NUMBER, at_least(0), "a number >= 0, or null", optional=True),
)


# Nodes the runs read by name, each setting there checked above or where named (AdamW's betas by check_rules,
# trainer.step.sdpa_backends by training.step_config): a key added there is refused, not ignored
STEP_KEYS = closed_keys(RULES, "trainer.step", "sdpa_backends")
CLOSED = {"optim": closed_keys(RULES, "optim", "betas"), "trainer.step": STEP_KEYS}
FINETUNE_CLOSED = {"task.optim": closed_keys(FINETUNE_RULES, "task.optim", "betas"), "trainer.step": STEP_KEYS,
                   # the mode and attention: the fine-tuning run checks them (finetune.run)
                   "finetune": closed_keys(FINETUNE_RULES, "finetune", "mode", "attention")}


def check_finetune_settings(cfg: DictConfig) -> None:
    """The fine-tuning run's numbers (task.*, finetune.*), before any data is read."""
    check_closed(cfg, FINETUNE_CLOSED)
    check_rules(cfg, FINETUNE_RULES, "task.optim.betas")


def check_run_settings(cfg: DictConfig, needs_documents: bool) -> None:
    """The pretraining run's numbers and combinations; raises naming the key, the value and the fix."""
    check_closed(cfg, CLOSED)
    check_rules(cfg, RULES, "optim.betas")
    max_tokens = cfg.get("max_tokens")
    points = list(cfg.get("save_at_tokens") or [])
    if any(isinstance(n, bool) or not isinstance(n, int) or n <= 0 or (max_tokens and n >= max_tokens)
           for n in points):
        raise ArmlmError(f"save_at_tokens={points}: give input-token counts between 0 and max_tokens={max_tokens}")
    words = cfg.get("save_at_words")
    if words and words != "babylm" and not (isinstance(words, (list, ListConfig)) and all(
            isinstance(w, int) and not isinstance(w, bool) and w > 0 for w in words)):
        raise ArmlmError(f"save_at_words={words}: give word counts, e.g. save_at_words=[1000000,2000000], or "
                         "save_at_words=babylm (the challenge's schedule)")
    # Words seen are counted through packed blocks' positions: a padded input (segment pairs) or a run whose count
    # does not start at its own first step (init_from, branch_from) or whose length is an estimate (max_flops) would
    # put a milestone where its words are not.
    cannot = [why for why, given in (("segment-pair inputs are padded", needs_documents),
                                     ("init_from= counts from the parent's weights, not its words",
                                      cfg.get("init_from")),
                                     ("branch_from= starts part-way through its trunk", cfg.get("branch_from")),
                                     ("a FLOPs budget's length is an estimate", cfg.get("max_flops")))
              if given]
    if words and cannot:
        raise ArmlmError(f"save_at_words cannot be honoured here: {cannot[0]}; train the milestones in a run of "
                         "packed blocks from its own first step with a token or step budget")
    budgets = {key: cfg.get(key) for key in BUDGETS if cfg.get(key)}
    if len(budgets) > 1:
        given = " and ".join(f"{key}={value if isinstance(value, int) else format(value, 'g')}"
                             for key, value in budgets.items())
        others = " ".join(f"{key}=null" for key in list(budgets)[:-1])
        raise ArmlmError(f"{given}: a run has one budget; to keep {list(budgets)[-1]} add {others}")
    if not budgets and cfg.trainer.max_steps <= 0 and cfg.trainer.max_epochs <= 0:
        raise ArmlmError("no end to training: set max_tokens=..., max_flops=..., data_epochs=..., trainer.max_steps=... "
                         "or trainer.max_epochs=...")
    corpus = OmegaConf.select(cfg, "data.corpus", default=None)
    if corpus is not None:
        check_corpus(corpus, needs_documents)


def check_corpus(corpus: DictConfig, needs_documents: bool) -> None:
    """Local corpus paths exist, and an objective that pairs documents does not get a single one."""
    for key in ("path", "paths", "train_file", "valid_file"):
        value = corpus.get(key)
        for path in [] if value is None else [value] if isinstance(value, str) else list(value):
            if not Path(path).exists():
                raise ArmlmFileError(f"data.corpus.{key}: {path} does not exist; give an existing path "
                                        "(real corpora live under data_dir / ARMLM_DATA_DIR)")
    paths = corpus.get("paths")
    if needs_documents and paths is not None and str(corpus.get("_target_", "")).endswith("TextFiles"):
        paths = [paths] if isinstance(paths, str) else list(paths)
        if len(paths) == 1 and Path(paths[0]).is_file() and not corpus.get("blank_line_documents", False):
            raise ArmlmError(
                "this objective pairs segments of different documents (next-sentence prediction), but "
                f"data.corpus.paths={paths} is one file read as one document; set "
                "data.corpus.blank_line_documents=true (blank lines separate documents) or give several files")


def check_branch_settings(cfg: DictConfig, objective: Any) -> None:
    """Branches need a stable phase, a budget whose steps are known before the run (not a FLOPs estimate) and an
    objective whose own schedule does not follow the budget."""
    budgets, trunk = list(cfg.get("branch_budgets") or []), cfg.get("branch_from")
    if not budgets and not trunk:
        return
    which = "branch_budgets" if budgets else "branch_from"
    if objective.needs_progress:
        raise ArmlmError(f"{which}: {type(objective).__name__} follows its budget (a mask rate that moves, or phases), so "
                         "a longer run is not a shorter one until its decay; train each budget from scratch")
    if cfg.optim.get("decay_fraction") is None:
        raise ArmlmError(f"{which} needs a stable learning rate before the decay: add optim.decay_fraction=0.2 "
                         "(the trunk and its branches alike)")
    if not (cfg.get("max_tokens") or cfg.get("data_epochs")):
        raise ArmlmError(f"{which} needs a budget of input tokens or passes (max_tokens= or data_epochs=), whose "
                         "steps are known before the run; a FLOPs budget's are an estimate")
    if budgets and trunk:
        raise ArmlmError("a run is a trunk (branch_budgets) or a branch (branch_from), not both")
    if cfg.get("init_from"):
        raise ArmlmError(f"{which} with init_from: a branch resumes its trunk's whole state, lineage and all, and "
                         "would not record it; continue from the parent in each run instead")
    own = float(cfg.get("data_epochs") or cfg.get("max_tokens"))
    if any(isinstance(b, bool) or not isinstance(b, (int, float)) or not 0 < b < own for b in budgets):
        raise ArmlmError(f"branch_budgets={budgets}: give budgets between 0 and this run's own ({own:g}), in its unit "
                         f"({'passes' if cfg.get('data_epochs') else 'input tokens'})")
