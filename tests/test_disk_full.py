"""A disk that fills mid-run ends in one line naming the intact checkpoint and the resume command."""

import errno
import os
import time

from training.disk_full import disk_full_cause, disk_full_message


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
