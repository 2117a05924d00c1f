"""Reading a text file so that a bad byte is reported as the file and line to fix."""

from __future__ import annotations

from pathlib import Path

from armlm.common.errors import ArmlmError


def read_utf8(path: Path) -> str:
    """The file's text with universal newlines (as `open` in text mode) and a leading BOM dropped; bytes
    that are not UTF-8 are a ValueError naming `path:line`."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig").replace("\r\n", "\n").replace("\r", "\n")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise ArmlmError(f"{path}:{line}: not UTF-8 text (byte {err.start}: {data[err.start:err.start + 1]!r}); "
                         "convert the file to UTF-8 or leave it out") from None
