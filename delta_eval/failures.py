"""Why something failed, in words: a line for a run's manifest and report, a shard's failure, the command line.

Example:
    >>> describe_failure(ValueError("bad value\\nmore"))
    'ValueError: bad value'
"""

from __future__ import annotations

import errno
import sqlite3

from delta_eval.exceptions import DeltaEvalError

__all__ = ["describe_failure", "disk_full"]


def disk_full(exc: BaseException) -> bool:
    """Whether an error says the disk is full (an OS write, or SQLite's own words for it)."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return isinstance(exc, sqlite3.OperationalError) and "disk is full" in str(exc)


def describe_failure(exc: BaseException) -> str:
    """Why a run failed, in a line for its manifest and report: the first error of a group, by its type and
    message (our errors carry no credentials; a disk found full is said so)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if disk_full(exc):
        where = getattr(exc, "filename", None) or "the run folder"
        return f"the disk is full (writing {where}): free space, then rerun the same command to resume"
    text = str(exc).splitlines()[0] if str(exc) else ""
    if isinstance(exc, DeltaEvalError) and text:
        return text[:500]  # our own errors say what happened in words
    return f"{type(exc).__name__}: {text}"[:500] if text else type(exc).__name__
