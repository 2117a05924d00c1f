"""The one error type for what a user asked for or gave: a setting out of range, a missing or malformed file, a
checkpoint that does not fit. Its message names the problem and the fix, and the commands print it as one line
(common.cli). Any other exception is a bug, or a failure below armlm, and keeps its traceback."""

from __future__ import annotations


class ArmlmError(ValueError):
    """A user error: the message says what is wrong and how to fix it. A ValueError, so code that catches one
    (and tests that expect one) keep working."""


class ArmlmFileError(ArmlmError, FileNotFoundError):
    """A user error about a file or folder that is not there."""
