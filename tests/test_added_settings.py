"""A setting added on the command line that nothing would read is refused before the run (common.added_settings)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from armlm.commands import COMMANDS
from armlm.common.commands import check_command
from armlm.common.errors import ArmlmError
from armlm.training.setup import build, build_model_config
from armlm.training.trainer import build_trainer
from tests.helpers.configs import REPO, composed_config
from tests.helpers.lanes import fast_lane_keeps

# What each Hydra command needs given to compose a config it would run (its `???` settings): a command added to the
# registry fails test_every_command_refuses_a_key_added_beside_its_own until it is listed here
REQUIRED = {"train": [], "finetune": ["task=rte", "pretrained=/some/run"], "evaluate": ["checkpoint=x"],
            "zeroshot": ["checkpoint=x"], "embeddings": [], "generate": ["checkpoint=x"],
            "export": ["checkpoint=x", "out=y"], "study": []}


def checked(command: str, *settings: str) -> None:
    overrides = [*REQUIRED[command], *settings]
    check_command(COMMANDS[command], composed_config(COMMANDS[command].config, overrides), overrides)


def test_every_command_refuses_a_key_added_beside_its_own():
    """`armlm <command> +<a typo of its first setting>=...`: Hydra composes it, and no command read it (armlm train
    +seeed=3 trained with seed 1234)."""
    assert set(REQUIRED) == {name for name, command in COMMANDS.items() if command.config is not None}
    for command in REQUIRED:
        config = composed_config(COMMANDS[command].config, REQUIRED[command])
        own = next(key for key in config if not OmegaConf.is_config(config[key]))
        with pytest.raises(ArmlmError, match=rf"^{own}x: armlm reads no such setting \(added, e\.g\. with "
                                             rf"\+{own}x=\.\.\., it would change nothing\); did you mean {own}\? "
                                             rf"the top level holds "):
            checked(command, f"+{own}x=1")


@pytest.mark.parametrize(("command", "setting", "message"), fast_lane_keeps([
    ("zeroshot", "+blimp.max_pair=10", r"blimp.max_pair: .*; did you mean max_pairs\? blimp holds dir, published, "
                                       r"max_pairs, context$"),
    ("zeroshot", "+blimp.context.token=8", r"did you mean tokens\? blimp.context holds file, tokens$"),
    ("generate", "+temp=0.5", r"did you mean temperature\? the top level holds checkpoint, "),
    ("finetune", "+task.epoch=3", r"did you mean epochs\? task holds "),
    ("evaluate", "+likelihood.draw=4", r"likelihood holds enabled, blocks, "),
    ("train", "+foo.bar=1", r"^foo.bar: armlm reads no such setting .*; the top level holds objective, model, "),
    ("train", "+data.foo=1", r"^data.foo: armlm.datamodules.pretrain.PretrainDataModule takes no argument foo "
                             r"\(added, e\.g\. with \+data\.foo=\.\.\., it would fail when built\); it takes corpus, "),
    ("train", "+trainer.foo=1", r"^trainer.foo: lightning.pytorch.Trainer takes no argument foo"),
], every=3))
def test_a_key_added_where_nothing_reads_it_is_refused_naming_what_its_node_holds(command, setting, message):
    with pytest.raises(ArmlmError, match=message):
        checked(command, setting)


@pytest.mark.parametrize(("command", "settings"), fast_lane_keeps([
    ("train", ["++seed=3"]),  # ++ sets a key the config holds
    ("train", ["+objective.fixed_count=true"]),  # an argument its class takes that the YAML leaves out
    ("train", ["+trainer.num_nodes=1"]),  # one of Lightning Trainer's
    ("train", ["logger=wandb", "+logger.wandb.mode=offline"]),  # WandbLogger passes its **kwargs to wandb.init
    # an open node (Command.open_settings)
    ("finetune", ["+task.metrics.f1={_target_:armlm.finetune.metrics.accuracy}"]),
    ("study", ["+study.gate=false"]),  # the planner's optional settings
    ("study", ["++study.budget=3"]),
    ("train", ["+hydra.job.env_set.X=1"]),  # Hydra's own
], every=3))
def test_a_key_added_that_is_read_passes(command, settings):
    checked(command, *settings)


def test_a_setting_a_class_passes_on_unseen_is_one_line_naming_its_node_when_built():
    """GlueDataModule passes its **settings on to FinetuneDataModule, so the check lets +task.data.max_lenght=9 by;
    the class's TypeError, which Hydra wrapped in a traceback, is one line naming the node."""
    cfg = composed_config("finetune", [*REQUIRED["finetune"], "+task.data.max_lenght=9"])
    check_command(COMMANDS["finetune"], cfg, [*REQUIRED["finetune"], "+task.data.max_lenght=9"])
    with pytest.raises(ArmlmError, match=r"^task.data: FinetuneDataModule.__init__\(\) got an unexpected keyword "
                                         r"argument 'max_lenght'; drop "):
        build(cfg.task.data, tokenizer_json="{}", seed=1)
    with pytest.raises(ArmlmError, match=r"^model: ModelConfig.__init__\(\) got an unexpected keyword argument 'foo'"):
        build_model_config(composed_config("train", ["+model.foo=1"]).model)  # a node built detached, named


def test_an_argument_the_run_gives_its_class_itself_is_refused_where_the_config_holds_it(tmp_path):
    """+data.seed=3 is one of PretrainDataModule's arguments, and the run's own seed= overrode it without a word; so
    did fine-tuning's task.epochs a +trainer.max_epochs=5. The commands' checks refuse them, and so does building."""
    for command, setting, says in (("train", "+data.seed=3", "data.seed: the run sets seed itself"),
                                   ("finetune", "+trainer.max_epochs=5", "trainer.max_epochs: the run sets max_epochs "
                                                                         "itself"),
                                   ("finetune", "+task.data.seed=5", "task.data.seed: the run sets seed itself")):
        with pytest.raises(ArmlmError, match=rf"^{says}, so this setting would change nothing; drop it$"):
            checked(command, setting)
    with pytest.raises(ArmlmError, match=r"^data.seed: the run sets seed itself, so this setting would change nothing"):
        build(composed_config("train", ["+data.seed=3"]).data, input_format="blocks", seed=1)
    finetune = composed_config("finetune", [*REQUIRED["finetune"], "+trainer.max_epochs=5"])
    with pytest.raises(ArmlmError, match=r"^trainer.max_epochs: the run sets max_epochs itself"):
        build_trainer(finetune.trainer, tmp_path, [], None, max_epochs=3)
    assert not any(tmp_path.iterdir())  # refused before any logger wrote


def test_a_search_paths_group_an_interpolations_key_and_a_list_item_are_not_refused(tmp_path):
    """A group of one's own (hydra.searchpath, README's extending recipe) is an option, not a setting; a key an
    interpolation reads is read; ++ on a list's item sets what the list holds."""
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "a.yaml").write_text("# @package _global_\nseed: 7\n")
    checked("train", f"hydra.searchpath=[file://{tmp_path}]", "+mine=a")
    checked("train", "+my_seed=3", "seed=${my_seed}")
    checked("train", "++optim.betas.0=0.8")


@pytest.mark.parametrize("settings", [["+seeed={a: 1}", "seeed.a=2"], ["+seeed._target_=x"], ["++seeed=3"]])
def test_a_key_added_with_children_or_hydras_keys_is_refused_all_the_same(settings):
    with pytest.raises(ArmlmError, match=r"^seeed(\._target_)?: armlm reads no such setting .*did you mean seed\?"):
        checked("train", *settings)


def test_a_key_under_a_node_the_config_lacks_is_matched_where_it_leaves_the_config():
    """+task.data.max_length=64 given to `armlm train`, which has no task: the typo to name is task, at the top."""
    with pytest.raises(ArmlmError, match=r"^task.data.max_length: armlm reads no such setting .*nothing\); the top "):
        checked("train", "+task.data.max_length=64")
    with pytest.raises(ArmlmError, match=r"^objectiv.mask_prob: .*; did you mean objective\? the top level holds "):
        checked("train", "+objectiv.mask_prob=0.2")


@pytest.mark.slow  # a process that starts Python
def test_a_command_on_a_search_path_checks_what_it_adds_with_that_path(tmp_path):
    """Hydra keeps hydra.searchpath out of the job's overrides: the check composed a study of one's own without it
    and failed ("Could not find 'study/mine'") before a study that added an arm's setting could start."""
    (tmp_path / "configs" / "study").mkdir(parents=True)
    shipped = (REPO / "configs" / "study" / "ar_vs_mlm.yaml").read_text()
    (tmp_path / "configs" / "study" / "mine.yaml").write_text(shipped)
    study = [sys.executable, "-m", "armlm", "study", f"hydra.searchpath=[file://{tmp_path / 'configs'}]", "study=mine",
             "scale=smoke", "seeds=1", "arm=mlm", "tasks=[]", f"root={tmp_path / 'root'}", "dry_run=true"]
    planned = subprocess.run([*study, "+study.arms.mlm.diagnose=false", "study.diagnose.candidates_arm=null"],
                             cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert planned.returncode == 0 and "stages: 1 planned" in planned.stdout + planned.stderr, planned.stderr[-2000:]
    refused = subprocess.run([*study, "+seeed=1"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert refused.returncode == 1 and "seeed: armlm reads no such setting" in refused.stdout + refused.stderr
