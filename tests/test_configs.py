"""Every config group composes and instantiates; bad names and settings fail early with clear messages."""

import subprocess
import sys
from pathlib import Path
from typing import get_args

import lightning as L
import pytest
from hydra.errors import ConfigCompositionException, MissingConfigException
from hydra.utils import instantiate
from lightning.fabric.plugins.precision import precision as lightning

from armlm.common.errors import ArmlmError
from armlm.datamodules.corpora import Corpus
from armlm.datamodules.finetune import FinetuneDataModule
from armlm.datamodules.pretrain import PretrainDataModule
from armlm.models.backbone import ModelConfig
from armlm.objectives.base import Objective
from armlm.training.preflight import check_config
from armlm.training.run import run_pretraining
from armlm.training.setup import build_model_config
from armlm.training.step_config import step_settings
from armlm.training.trainer import build_trainer, check_sharded_clipping, lightning_settings
from armlm.training.validate import PRECISIONS
from tests.helpers.configs import composed_config
from tests.helpers.lanes import fast_lane_keeps
from tests.helpers.vocabularies import word_tokenizer_json

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs"


def options(group: str) -> list[str]:
    """The choices of a group; files starting with _ are shared bases that other options include."""
    return sorted(p.stem for p in (CONFIGS / group).glob("*.yaml") if not p.stem.startswith("_"))


def composed(*overrides: str):
    """The pretraining config, or the fine-tuning one when a task is named (as `python train.py task=...`)."""
    return composed_config("finetune" if any(o.startswith("task=") for o in overrides) else "train", overrides)


def test_groups_are_not_empty():
    assert {"ar", "mlm"} <= set(options("objective"))  # tests/test_objective_contract.py covers every one
    assert options("model") == ["base", "small", "tiny"]
    assert options("trainer") == ["cpu", "ddp", "fsdp", "gpu"]
    assert {"enwiki", "brown", "brown_enwiki", "wikitext", "text", "hf"} <= set(options("data"))
    assert options("task") == sorted(["cola", "sst2", "mrpc", "qqp", "stsb", "mnli", "qnli", "rte", "wnli",
                                      "conll2003"])


@pytest.mark.parametrize("name", options("objective"))
def test_objective_configs_instantiate(name):
    assert isinstance(instantiate(composed(f"objective={name}").objective), Objective)


@pytest.mark.parametrize("name", options("model"))
def test_model_configs_instantiate(name):
    assert isinstance(build_model_config(composed(f"model={name}").model), ModelConfig)


def test_model_compile_names_where_compiling_moved():
    with pytest.raises(ValueError, match="model.compile is now trainer.step.compile"):
        build_model_config(composed("+model.compile=true").model)


@pytest.mark.parametrize("name", options("data"))
def test_data_configs_instantiate(name, tmp_path, request):
    config = Path(__file__).resolve().parents[1] / "configs" / "data" / f"{name}.yaml"
    if "data_dir" in config.read_text():  # a corpus from the shared data folder checks it is there when built
        request.getfixturevalue("data_dir")  # skips with its reason in a fresh clone without the folder
    extra = ["data.corpus.paths=[x]"] if name == "text" else []  # the one setting without a default
    cfg = composed(f"data={name}", f"data.cache_dir={tmp_path}", *extra)
    dm = instantiate(cfg.data)
    assert isinstance(dm, PretrainDataModule) and isinstance(dm.corpus, Corpus)


@pytest.mark.parametrize("command", ["train", "embeddings"])
def test_a_corpus_may_bring_its_own_vocabulary_and_the_command_line_still_wins(command):
    shared = composed_config(command, []).data.tokenizer.vocab_size
    assert composed_config(command, ["data=brown"]).data.tokenizer.vocab_size == shared == 1024
    own = composed_config(command, ["data=gutenwiki"]).data
    assert own.tokenizer.vocab_size != shared and own.tokenizer.kind == "wordpiece"  # the rest stays shared
    assert own.corpus.blank_line_documents is True
    given = composed_config(command, ["data=gutenwiki", "data.tokenizer.vocab_size=16384"])
    assert given.data.tokenizer.vocab_size == 16384


@pytest.mark.parametrize("name", options("task"))
def test_task_configs_instantiate_their_datamodule(name):
    cfg = composed(f"task={name}")
    assert cfg.task.epochs > 0 and cfg.task.optim.lr > 0 and cfg.task.optim.features_lr > 0
    dm = instantiate(cfg.task.data, tokenizer_json=word_tokenizer_json(["a"]))
    assert isinstance(dm, FinetuneDataModule)
    assert dm.info.name == name and dm.info.kind == ("regression" if name == "stsb" else
                                                     "tagging" if name == "conll2003" else "classification")


@pytest.mark.parametrize("name", options("trainer"))
def test_trainer_configs_instantiate(name, tmp_path):
    cfg = composed(f"trainer={name}")
    # This machine has no GPU: check every other argument by building the preset on the CPU.
    cpu = {"accelerator": "cpu", "devices": 1, "default_root_dir": str(tmp_path), "logger": False,
           "enable_checkpointing": False}
    if cfg.trainer.get("strategy") == "fsdp":  # Lightning knows the strategy, and FSDP needs GPUs
        with pytest.raises(Exception, match="`fsdp` requires a GPU accelerator"):
            instantiate(lightning_settings(cfg.trainer), **cpu)
        cpu["strategy"] = "auto"
    trainer = instantiate(lightning_settings(cfg.trainer), **cpu)
    assert isinstance(trainer, L.Trainer)
    assert trainer.gradient_clip_val == cfg.trainer.gradient_clip_val


def test_fsdp_refuses_norm_clipping_by_each_ranks_shard(tmp_path):
    with pytest.raises(ArmlmError, match=r"gradient_clip_val=1.0 under FSDP would clip each rank's shard"):
        build_trainer(composed("trainer=fsdp").trainer, tmp_path, [])
    unclipped = composed("trainer=fsdp", "trainer.gradient_clip_val=null").trainer
    with pytest.raises(Exception, match="No supported gpu backend found"):  # past the refusal, to Lightning's
        build_trainer(unclipped, tmp_path, [])
    check_sharded_clipping(composed("trainer=ddp").trainer)  # DDP's gradients are whole on every rank
    check_sharded_clipping(composed("trainer=fsdp", "+trainer.gradient_clip_algorithm=VALUE").trainer)  # per entry


@pytest.mark.parametrize("name", options("experiment"))
def test_experiment_presets_compose_and_pass_the_startup_checks(name):
    cfg = composed(f"experiment={name}")
    check_config(cfg)


@pytest.mark.parametrize("override, valid", [("objective=permutation", "mlm_nsp"), ("model=huge", "tiny"),
                                             ("data=nowhere", "enwiki")])
def test_unknown_names_list_the_valid_options(override, valid):
    with pytest.raises(MissingConfigException, match=f"(?s)Available options in .*{valid}"):
        composed(override)


@pytest.mark.slow
def test_the_command_line_lists_the_valid_options_of_an_unknown_name():
    result = subprocess.run([sys.executable, "train.py", "objective=permutation"], cwd=REPO, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode != 0
    line = next(line for line in result.stderr.splitlines() if "[ERROR]" in line)  # one line, not Hydra's list
    assert "Could not find 'objective/permutation'; choose one of" in line and "mlm_nsp" in line, result.stderr


def test_bad_settings_fail_before_any_data_processing(tmp_path):
    cfg = composed("objective.mask_prob=0.9", f"data.cache_dir={tmp_path / 'cache'}", f"output_dir={tmp_path / 'run'}")
    with pytest.raises(ValueError, match="must sum to 1"):
        run_pretraining(cfg)
    assert not (tmp_path / "cache").exists() and not (tmp_path / "run").exists()


def test_bad_rates_and_sizes_are_rejected_at_startup():
    with pytest.raises(ValueError, match="outside"):
        check_config(composed("objective.mask_rate=1.5"))
    with pytest.raises(ValueError, match="max_len"):
        check_config(composed("data.block_size=1024"))
    with pytest.raises(ValueError, match="divisible"):
        check_config(composed("model.n_heads=5"))
    with pytest.raises(FileNotFoundError, match="ckpt_path"):
        check_config(composed("ckpt_path=/nonexistent.ckpt"))
    for given in ("pretrained=/some/run", "vectors=/some/vectors"):  # fine-tuning's settings: Hydra refuses them
        with pytest.raises(ConfigCompositionException, match=f"Could not override '{given.split('=')[0]}'"):
            composed(given)


@pytest.mark.parametrize("setting", ["trainer.max_epochs=5", "trainer.limit_val_batches=0.5", "save_at_tokens=[100]",
                                     "model.d_model=64", "objective=ar", "init_from=outputs/ar/x"])
def test_fine_tuning_refuses_the_settings_it_would_ignore(setting):
    """The checkpoint brings model, objective and tokenizer, and fine-tuning fixes its validation and epochs
    (task.epochs), so the fine-tuning config has none of these keys: Hydra refuses them by name."""
    key = setting.split("=")[0]
    with pytest.raises(ConfigCompositionException, match=f"Could not override '{key}'"):
        composed("task=rte", setting)
    composed("task=rte", "trainer.max_steps=10", "trainer.precision=32-true", "seed=2")  # honoured


def test_a_run_without_any_end_is_rejected():
    with pytest.raises(ValueError, match="no end to training"):
        check_config(composed("max_tokens=null"))


@pytest.mark.parametrize("override,named", fast_lane_keeps([
    ("seed=-1", "seed=-1: expected an integer >= 0"),
    ("seed=abc", "seed='abc': expected an integer"),
    ("max_tokens=0", "max_tokens=0: expected a positive integer"),
    ("max_tokens=1.5", "max_tokens=1.5"),
    ("max_flops=0", "max_flops=0: expected a positive number of training FLOPs"),
    ("max_flops=1e12", "max_tokens=2200000 and max_flops=1e+12: a run has one budget; to keep max_flops add "
                       "max_tokens=null"),
    ("data_epochs=0", "data_epochs=0: expected a positive number of passes"),
    ("data_epochs=4", "max_tokens=2200000 and data_epochs=4: a run has one budget; to keep data_epochs add "
                      "max_tokens=null"),
    ("data.block_size=4", "data.block_size=4: expected an integer >= 8"),
    ("data.batch_size=0", "data.batch_size=0"),
    ("data.batch_size=true", "data.batch_size=True"),
    ("data.num_workers=-2", "data.num_workers=-2"),
    ("optim.lr=0", "optim.lr=0: expected a number > 0"),
    ("optim.lr=fast", "optim.lr='fast'"),
    ("optim.weight_decay=-0.1", "optim.weight_decay=-0.1"),
    ("optim.warmup_steps=2.5", "optim.warmup_steps=2.5"),
    ("optim.min_lr_ratio=2", "optim.min_lr_ratio=2"),
    ("optim.betas=[0.9]", "optim.betas="),
    ("optim.betas=[0.9,1.0]", "optim.betas="),
    ("trainer.max_steps=0", "trainer.max_steps=0"),
    ("trainer.log_every_n_steps=0", "trainer.log_every_n_steps=0"),
    ("trainer.accumulate_grad_batches=0", "trainer.accumulate_grad_batches=0"),
    ("trainer.gradient_clip_val=-1", "trainer.gradient_clip_val=-1"),
    ("trainer.val_check_interval=0", "trainer.val_check_interval=0"),
    ("trainer.val_check_interval=1.5", "trainer.val_check_interval=1.5"),
    ("trainer.limit_val_batches=-1", "trainer.limit_val_batches=-1"),
    ("nonfinite_loss=ignore", "nonfinite_loss='ignore': expected one of ('stop', 'skip')"),
    ("model.d_model=wide", "model.d_model='wide' must be a positive integer"),
    ("model.dropout=some", "model.dropout='some' must be a number"),
    ("objective.mask_rate=lots", "objective.mask_rate='lots' must be a number in [0, 1]"),
    ("data.tokenizer.vocab_size=big", "data.tokenizer.vocab_size='big' must be an integer"),
], every=4))
def test_every_numeric_run_setting_is_checked_at_startup(override, named):
    with pytest.raises(ValueError) as err:
        check_config(composed(override))
    assert named in str(err.value)


def test_missing_corpus_paths_and_single_document_pairs_are_rejected_at_startup(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"data.corpus.paths: .*nowhere does not exist"):
        check_config(composed("data=text", f"data.corpus.paths=[{tmp_path / 'nowhere'}]"))
    with pytest.raises(FileNotFoundError, match="data.corpus.path: .* does not exist"):
        check_config(composed("data=brown", f"data.corpus.path={tmp_path / 'no-brown'}"))
    one_file = tmp_path / "book.txt"
    one_file.write_text("one long document\n", encoding="utf-8")
    with pytest.raises(ValueError, match="next-sentence prediction.*blank_line_documents=true"):
        check_config(composed("objective=mlm_nsp", "data=text", f"data.corpus.paths=[{one_file}]"))
    check_config(composed("objective=mlm", "data=text", f"data.corpus.paths=[{one_file}]"))  # one doc is fine
    check_config(composed("objective=mlm_nsp", "data=text", f"data.corpus.paths=[{one_file}]",
                          "data.corpus.blank_line_documents=true"))


@pytest.mark.parametrize("override,named", fast_lane_keeps([
    ("task.epochs=0", "task.epochs=0: expected an integer >= 1"),
    ("task.data.batch_size=many", "task.data.batch_size='many'"),
    ("task.data.max_length=2", "task.data.max_length=2"),
    ("task.data.max_train_examples=0", "task.data.max_train_examples=0"),
    ("task.optim.lr=-1", "task.optim.lr=-1"),
    ("task.optim.warmup_ratio=1.5", "task.optim.warmup_ratio=1.5"),
    ("task.optim.betas=[0.9]", "task.optim.betas="),
    ("finetune.dropout=1", "finetune.dropout=1"),
    ("finetune.feature_layers=0", "finetune.feature_layers=0"),
    ("trust_remote_code=maybe", "trust_remote_code='maybe': expected true or false"),
    ("trainer.precision=fp16", "trainer.precision='fp16': expected one of"),
    ("finetune.pooling=max", "finetune.pooling='max': expected auto or one of ('first', 'last', 'mean')"),
    ("finetune.word_subword=middle", "finetune.word_subword='middle': expected auto or one of ('first', 'last')"),
], every=4))
def test_fine_tuning_numbers_are_checked_before_anything_is_read(override, named):
    from armlm.finetune.run import run_finetune

    cfg = composed("task=sst2", "pretrained=/nowhere/run", override)  # refused before the checkpoint is read
    with pytest.raises(ValueError) as err:
        run_finetune(cfg)
    assert named in str(err.value)


def test_the_gpu_trainer_compiles_the_step_with_tf32_pinned_workers():
    gpu, cpu = (step_settings(composed(f"trainer={name}").trainer) for name in ("gpu", "cpu"))
    assert gpu["compile"] and gpu["matmul_precision"] == "high" and gpu["pin_memory"] and gpu["loader_workers"] >= 1
    assert not cpu["compile"] and cpu["matmul_precision"] == "highest" and not cpu["pin_memory"]
    assert gpu["compile_mode"] == "default" and gpu["mfu_peak_flops"] is None  # the data sheet's peak


def test_fine_tuning_applies_the_trainers_precision_and_kernels_and_fixes_the_step_settings_it_does_not_apply():
    """trainer=gpu compiles, pins and widens pretraining's loaders; fine-tuning runs eager with task.data.num_workers
    unpinned, and took those settings without a word (trainer.step.compile=true changed nothing)."""
    gpu = step_settings(composed_config("finetune", [*FINETUNE, "trainer=gpu"]).trainer)
    assert gpu["matmul_precision"] == "high" and gpu["sdpa_backends"] == ["flash", "efficient", "math"]
    assert not gpu["compile"] and not gpu["pin_memory"] and gpu["loader_workers"] == 0 and gpu["mfu_peak_flops"] is None
    from armlm.finetune.preflight import check_config as check_finetune

    check_finetune(composed_config("finetune", [*FINETUNE, "trainer=gpu"]))
    for setting, says in (("compile=true", "expected false: fine-tuning runs eager"), ("pin_memory=true", "do not pin"),
                          ("loader_workers=2", "task.data.num_workers"), ("mfu_peak_flops=1e15", "logs no train/mfu"),
                          ("matmul_precision=null", "expected one of")):
        with pytest.raises(ArmlmError, match=rf"^trainer\.step\.{setting.split('=')[0]}=.*{says}"):
            check_finetune(composed_config("finetune", [*FINETUNE, "trainer=gpu", f"trainer.step.{setting}"]))


@pytest.mark.parametrize(("setting", "message"), [
    ("trainer.step.compile=yes", "trainer.step.compile='yes': expected true or false"),
    ("trainer.step.compile_mode=fast", "trainer.step.compile_mode='fast': expected one of"),
    ("trainer.step.matmul_precision=low", "trainer.step.matmul_precision='low': expected one of"),
    ("trainer.step.matmul_precision=null", "trainer.step.matmul_precision=None: expected one of"),
    ("trainer.step.mfu_peak_flops=0", "trainer.step.mfu_peak_flops=0: expected a positive FLOP/s"),
    ("trainer.precision=bf16-mix", "trainer.precision='bf16-mix': expected one of"),
])
def test_step_settings_are_checked_before_any_data(setting, message):
    with pytest.raises(ValueError, match=message):
        check_config(composed(setting))


def test_the_precisions_taken_are_lightnings():
    assert sorted(map(str, PRECISIONS)) == sorted(map(str, [*get_args(lightning._PRECISION_INPUT_STR), *get_args(
        lightning._PRECISION_INPUT_STR_ALIAS), *get_args(lightning._PRECISION_INPUT_INT)]))
    for precision in ("bf16-mixed", "32-true", 32):
        check_config(composed(f"trainer.precision={precision}"))


FINETUNE = ["task=rte", "pretrained=/some/run"]


@pytest.mark.parametrize(("command", "settings"), [
    ("train", ["+optim.warmup=100"]), ("train", ["+trainer.step.compiled=true"]),
    ("finetune", [*FINETUNE, "+task.optim.warmup=0.1"]), ("finetune", [*FINETUNE, "+trainer.step.compiled=true"]),
    ("finetune", [*FINETUNE, "+finetune.pool=mean"])])
def test_a_setting_added_where_a_run_reads_settings_by_name_is_refused_not_ignored(command, settings):
    """Hydra's advice for a key the config lacks is to add it, +key=value; nothing reads a key added to the optimiser's
    or the step's settings, so a typo there ran the whole run with the default. The command's own check refuses it,
    as `armlm <command>` and a study's launch run it."""
    from armlm.commands import COMMANDS
    from armlm.common.commands import resolve

    node, key = settings[-1][1:].split("=")[0].rsplit(".", 1)
    with pytest.raises(ArmlmError, match=rf"^{node}\.{key}: armlm reads no such setting \(added, e\.g\. with "
                                         rf"\+{node}\.{key}=\.\.\., it would change nothing\); "
                                         rf"(did you mean [\w ]+\? )?{node} holds "):
        resolve(COMMANDS[command].check)(composed_config(COMMANDS[command].config, settings))


def test_the_settings_read_by_name_are_exactly_those_their_configs_hold():
    """The keys a closed node may hold (training.validate's CLOSED tables, from its rules) are every trainer's,
    every task's and fine-tuning's own: none of their settings is refused, and none is left unchecked."""
    from armlm.training.validate import CLOSED, FINETUNE_CLOSED

    trainers = sorted(path.stem for path in (REPO / "configs" / "trainer").glob("*.yaml"))
    tasks = sorted(path.stem for path in (REPO / "configs" / "task").glob("*.yaml") if not path.stem.startswith("_"))
    assert set(CLOSED) == {"optim", "trainer.step"} and set(FINETUNE_CLOSED) == {"task.optim", "trainer.step",
                                                                                 "finetune"}
    assert sorted(FINETUNE_CLOSED["finetune"]) == sorted(composed_config("finetune", ["task=rte"]).finetune)
    assert sorted(CLOSED["optim"]) == sorted(composed().optim)
    for trainer in trainers:
        assert sorted(CLOSED["trainer.step"]) == sorted(composed(f"trainer={trainer}").trainer.step), trainer
    assert FINETUNE_CLOSED["trainer.step"] == CLOSED["trainer.step"]
    for task in tasks:
        assert sorted(FINETUNE_CLOSED["task.optim"]) == sorted(composed_config("finetune", [f"task={task}"]).task.optim)


def test_a_trainer_config_without_step_settings_names_where_they_come_from():
    trainer = lightning_settings(composed("trainer=cpu").trainer)  # the Lightning part alone
    with pytest.raises(ValueError, match=r"no `step` settings: start it from configs/trainer/cpu.yaml"):
        step_settings(trainer)
