"""common.cli: a user error (ArmlmError) ends in one line and exit status 1; any other exception keeps its
traceback; ARMLM_TRACEBACK=1 shows a user error's traceback too; Lightning's messages take a configured route once."""

from __future__ import annotations

import io
import logging

import pytest

from armlm.common.cli import LIGHTNING_PACKAGES, lightning_through_the_root, run_or_exit
from armlm.common.errors import ArmlmError, ArmlmFileError

LOG = logging.getLogger("armlm.test")


def failing(error: BaseException):
    def run(cfg):
        raise error
    return run


def test_a_user_error_is_one_line_and_exit_status_1(caplog, monkeypatch):
    monkeypatch.delenv("ARMLM_TRACEBACK", raising=False)
    with caplog.at_level(logging.ERROR), pytest.raises(SystemExit) as stop:
        run_or_exit(failing(ArmlmError("data.batch_size=0: expected an integer >= 1")), None, LOG)
    assert stop.value.code == 1
    [record] = caplog.records
    assert record.getMessage().startswith("ArmlmError: data.batch_size=0: expected an integer >= 1")
    assert record.exc_info is None


@pytest.mark.parametrize("error", [ValueError("math domain error"), FileNotFoundError("/nowhere"),
                                   RuntimeError("CUDA error")])
def test_anything_else_keeps_its_traceback(error, monkeypatch):
    monkeypatch.delenv("ARMLM_TRACEBACK", raising=False)
    with pytest.raises(type(error)):
        run_or_exit(failing(error), None, LOG)


def test_armlm_traceback_shows_a_user_errors_trace(monkeypatch):
    monkeypatch.setenv("ARMLM_TRACEBACK", "1")
    with pytest.raises(ArmlmFileError):
        run_or_exit(failing(ArmlmFileError("data.corpus.paths: x does not exist")), None, LOG)


def test_user_errors_are_still_value_and_file_errors():
    assert issubclass(ArmlmError, ValueError) and issubclass(ArmlmFileError, FileNotFoundError)


def test_a_required_setting_left_out_is_one_line_naming_it(caplog, monkeypatch):
    """`out: ???` (export's folder) read before the user gave it: omegaconf's MissingMandatoryValue, one line."""
    from omegaconf import OmegaConf
    monkeypatch.delenv("ARMLM_TRACEBACK", raising=False)
    cfg = OmegaConf.create({"out": "???"})
    with caplog.at_level(logging.ERROR), pytest.raises(SystemExit) as stop:
        run_or_exit(lambda c: c.out, cfg, LOG)
    [record] = caplog.records
    assert stop.value.code == 1 and record.exc_info is None
    assert record.getMessage() == "ArmlmError: out has no value; give it on the command line, e.g. out=<value>"


class Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.mark.parametrize("configured", [True, False])
def test_lightnings_messages_take_the_configured_route_once(configured, monkeypatch):
    """As Lightning's packages leave themselves at import: a console handler on each, lightning.pytorch's and
    lightning.fabric's not propagating (imported before Hydra configured logging). With root handlers, their
    messages reach those once and Lightning's own consoles nothing; without, they stay as they were."""
    root, consoles = Kept(), {name: io.StringIO() for name in LIGHTNING_PACKAGES}
    monkeypatch.setattr(logging.getLogger(), "handlers", [root] if configured else [])
    for name in LIGHTNING_PACKAGES:
        monkeypatch.setattr(logging.getLogger(name), "handlers", [logging.StreamHandler(consoles[name])])
        monkeypatch.setattr(logging.getLogger(name), "propagate", name == "lightning")
    lightning_through_the_root()
    logging.getLogger("lightning.pytorch.utilities.rank_zero").info("GPU available: False, used: False")
    logging.getLogger("lightning.fabric.utilities.seed").info("Seed set to 1")
    if configured:
        assert root.messages == ["GPU available: False, used: False", "Seed set to 1"]
        assert all(console.getvalue() == "" for console in consoles.values())
    else:
        assert root.messages == [] and consoles["lightning"].getvalue() == ""
        assert consoles["lightning.pytorch"].getvalue() == "GPU available: False, used: False\n"
        assert consoles["lightning.fabric"].getvalue() == "Seed set to 1\n"
