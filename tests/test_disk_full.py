"""A disk that fills mid-run ends in one line naming the full disk, the intact checkpoint and the resume command;
the command finishes the run once there is space."""

import errno
import os
import shlex
import subprocess
import sys
import time

import pytest
import torch

from armlm.training.disk_full import disk_full_cause, disk_full_message, mount_point
from tests.helpers.configs import REPO, TINY_OVERRIDES


def torch_save_failure() -> RuntimeError:
    """The chain torch.save leaves when the disk fills: its RuntimeError, raised while handling the ENOSPC."""
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 628800 vs 628688")
    except RuntimeError as err:
        return err


def test_the_no_space_error_is_found_behind_whatever_the_writer_raised():
    cause = disk_full_cause(torch_save_failure())
    assert cause is not None and cause.errno == errno.ENOSPC
    assert disk_full_cause(RuntimeError("another failure")) is None
    assert disk_full_cause(OSError(errno.EACCES, "denied")) is None


def test_the_message_names_the_newest_checkpoint_and_the_command_that_resumes_from_it(tmp_path):
    folder = tmp_path / "run"
    (folder / "checkpoints").mkdir(parents=True)
    older, newer = folder / "checkpoints" / "best-step2.ckpt", folder / "checkpoints" / "last.ckpt"
    older.write_bytes(b"x")
    newer.write_bytes(b"x")
    os.utime(older, (time.time() - 60, time.time() - 60))
    message = disk_full_message(OSError(errno.ENOSPC, "full", str(folder / "x.ckpt")), folder,
                                ["objective=ar", f"hydra.run.dir={folder}", "ckpt_path=old"])
    assert str(newer) in message and f"writing {folder / 'x.ckpt'}" in message
    assert message.endswith(f"python train.py objective=ar hydra.run.dir={folder} ckpt_path=last")
    newer.unlink()  # only a best-step checkpoint: resume from that file
    assert disk_full_message(OSError(errno.ENOSPC, "full"), folder, []).endswith(f"ckpt_path={older}")
    older.unlink()
    assert "before any checkpoint" in disk_full_message(OSError(errno.ENOSPC, "full"), folder, ["objective=ar"])


def test_the_disk_is_named_by_its_mount_point(tmp_path):
    assert mount_point(tmp_path / "not" / "yet" / "written.ckpt") == mount_point(tmp_path)
    assert os.path.ismount(mount_point(tmp_path)) and str(tmp_path).startswith(str(mount_point(tmp_path)))
    message = disk_full_message(OSError(errno.ENOSPC, "full"), tmp_path, [])
    assert message.startswith(f"no space left on the disk mounted at {mount_point(tmp_path)}")


# train.py with a disk that fills at the second checkpoint: torch.save writes a few bytes, then finds no space.
FILL_THE_DISK = """
import errno, sys, torch
saves = []
def save(obj, f, *args, **kwargs):
    saves.append(f)
    if len(saves) > 1:
        f.write(b"half a checkpoint")
        raise OSError(errno.ENOSPC, "No space left on device", getattr(f, "name", None))
    return real_save(obj, f, *args, **kwargs)
real_save, torch.save = torch.save, save
sys.argv = ["train.py", *sys.argv[1:]]
import runpy
runpy.run_path("train.py", run_name="__main__")  # as `python train.py`, so Hydra finds configs/ beside it
"""


@pytest.mark.slow
def test_a_run_that_fills_the_disk_ends_in_one_line_and_its_command_finishes_it(tmp_path, cache_dir):
    run = tmp_path / "run"
    overrides = [*TINY_OVERRIDES, f"data.cache_dir={cache_dir}", "save_at_tokens=[512]", f"hydra.run.dir={run}"]
    full = subprocess.run([sys.executable, "-c", FILL_THE_DISK, *overrides], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    output = full.stdout + full.stderr
    assert full.returncode == 1, output
    assert "Traceback" not in output
    [line] = [line for line in output.splitlines() if "no space left" in line]
    intact = run / "checkpoints" / "tokens-512.ckpt"
    assert f"DiskFullError: no space left on the disk mounted at {mount_point(run)}" in line
    assert f"The newest checkpoint, {intact}, is intact" in line
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["tokens-512.ckpt"]  # no half-written file
    assert torch.load(intact, weights_only=True)["global_step"] == 2
    command = shlex.split(line.split("then resume: ", 1)[1])
    assert command[:2] == ["python", "train.py"] and command[-1] == f"ckpt_path={intact}"
    resumed = subprocess.run([sys.executable, *command[1:]], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 8
