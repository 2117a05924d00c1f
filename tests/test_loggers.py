"""The `logger` group: TensorBoard (default), CSV and Weights & Biases (offline, no network) receive the same
tags from one run; armlm's reports read TensorBoard and say so when it is missing."""

from __future__ import annotations

import csv
import struct
from pathlib import Path

import pytest

from armlm.common.scalars import run_scalars
from armlm.training.run import run_pretraining
from tests.helpers.configs import composed_config, tiny_config

WANDB_BLOCK, WANDB_HEADER, RECORD_HEADER = 32768, 7, 7  # W&B's run file: a LevelDB-style log of protobuf records


def wandb_history_keys(run_file: Path) -> set[str]:
    """Every key the offline run file's history records hold (the file is read here, not by wandb: it has no
    reader of its own in Python)."""
    from wandb.proto import wandb_internal_pb2  # W&B's import takes a second: only the slow test below reads its file

    raw, pos, pending, keys = run_file.read_bytes(), WANDB_HEADER, b"", set()
    assert raw[:4] == b":W&B"
    while pos + RECORD_HEADER <= len(raw):
        room = WANDB_BLOCK - pos % WANDB_BLOCK
        if room < RECORD_HEADER:  # a block's tail too short for a header is padding
            pos += room
            continue
        _, length, kind = struct.unpack("<IHB", raw[pos:pos + RECORD_HEADER])
        pos += RECORD_HEADER
        pending += raw[pos:pos + length]
        pos += length
        if kind in (1, 4):  # a full record, or the last piece of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            pending = b""
            if record.WhichOneof("record_type") == "history":
                keys |= {item.key or "/".join(item.nested_key) for item in record.history.item}
    return keys


@pytest.mark.slow
def test_every_logger_gets_the_same_tags(tmp_path, cache_dir, monkeypatch):
    import wandb

    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    run_pretraining(tiny_config(tmp_path, cache_dir, "objective=mlm", "logger=[tensorboard,csv,wandb]",
                          "logger.wandb.offline=true"))
    wandb.finish()  # the CLI's process exit does this; here the run file is read in the same process
    tensorboard = set(run_scalars(tmp_path).columns) - {"epoch", "hp_metric"}  # TensorBoardLogger's own extras
    with open(tmp_path / "csv" / "metrics.csv") as f:
        columns = set(next(csv.reader(f))) - {"epoch", "step"}
    [run_file] = (tmp_path / "wandb").glob("offline-run-*/run-*.wandb")
    wandb_keys = {k for k in wandb_history_keys(run_file) if not k.startswith("_")} - {"epoch", "trainer/global_step"}
    assert {"train/loss", "val/loss", "train/tokens_seen", "val/ppl"} <= tensorboard
    # Two comparisons, each naming its difference: a chained `==` reports neither side when it fails.
    assert columns == tensorboard, f"csv only {columns - tensorboard}, tensorboard only {tensorboard - columns}"
    assert wandb_keys == tensorboard, f"wandb only {wandb_keys - tensorboard}, tensorboard only {tensorboard - wandb_keys}"


@pytest.mark.slow
def test_reports_name_the_missing_tensorboard(tmp_path, cache_dir):
    run_pretraining(tiny_config(tmp_path, cache_dir, "objective=ar", "logger=csv", "trainer.max_steps=2"))
    assert (tmp_path / "csv" / "metrics.csv").is_file() and not (tmp_path / "tensorboard").exists()
    with pytest.raises(FileNotFoundError, match="tensorboard among the loggers"):
        run_scalars(tmp_path)


@pytest.mark.slow
def test_no_logger_is_allowed(tmp_path, cache_dir):
    summary = run_pretraining(tiny_config(tmp_path, cache_dir, "objective=ar", "logger=[]", "trainer.max_steps=2"))
    assert summary["steps"] == 2 and not (tmp_path / "tensorboard").exists()


def test_an_online_wandb_logger_without_a_key_is_refused_before_any_data(monkeypatch, without_wandb_credentials):
    """W&B's UsageError came from inside fit, after the tokenizer and cache were built, as a traceback (probed on 5
    December): now one line before the data, naming `wandb login` and the offline setting, found without W&B's login
    (which can prompt, and reaches the server when a key is there). Offline, W&B's disabled mode, a key in the
    environment or in netrc, or TensorBoard alone go on."""
    from omegaconf import OmegaConf

    from armlm.common.errors import ArmlmError
    from armlm.training.loggers import check_loggers

    home = without_wandb_credentials
    loggers = composed_config("train", ["logger=[tensorboard,wandb]"]).logger
    with pytest.raises(ArmlmError, match=r"^logger=wandb: W&B finds no API key here .*wandb login.*"
                                         r"logger.wandb.offline=true"):
        check_loggers(loggers)
    check_loggers(OmegaConf.merge(loggers, {"wandb": {"offline": True}}))
    check_loggers(composed_config("train", ["logger=[wandb]", "+logger.wandb.mode=disabled"]).logger)
    check_loggers(OmegaConf.create({"tensorboard": loggers.tensorboard}))
    (home / ".netrc").write_text("machine api.wandb.ai\n  login user\n  password " + "0" * 40 + "\n")
    (home / ".netrc").chmod(0o600)
    check_loggers(loggers)
    monkeypatch.setenv("WANDB_BASE_URL", "https://wandb.example.org")  # a server of one's own: its own entry
    with pytest.raises(ArmlmError, match="finds no API key"):
        check_loggers(loggers)
    monkeypatch.setenv("WANDB_API_KEY", "0" * 40)
    check_loggers(loggers)
