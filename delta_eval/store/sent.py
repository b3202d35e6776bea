"""A count of the model calls a session sent, kept on disk as they are sent, so a killed session's calls in flight
are still counted.

The manifest records a session's calls at each batch; the answers it got after its last batch are found from the
response cache (each answer is cached once). What neither shows is the calls in flight at the kill: the provider
may have answered, and billed, them. Each call sent appends one byte to ``_sent/<session>`` in the run folder (an
unbuffered append: the bytes are the kernel's once written, so a killed process loses none); the next session reads
the file's size as the number of calls the killed one sent.

Example:
    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> journal = SentJournal(folder, 1)
    >>> for _ in range(3):
    ...     journal.record()
    >>> journal.close()
    >>> sent_by(folder, 1)
    3
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from delta_eval.store import safe_paths

__all__ = ["SENT_DIR", "SentJournal", "remove_journals", "sent_by"]

#: The folder of the journals inside a run folder.
SENT_DIR = "_sent"
_NAME = re.compile(r"^\d+$")


def _path(folder: Path, session: int) -> Path:
    return folder / SENT_DIR / str(session)


class SentJournal:
    """The journal of one session's sent calls: :meth:`record` once per call sent."""

    def __init__(self, folder: Path, session: int) -> None:
        safe_paths.mkdir(folder, folder / SENT_DIR)
        # Appended to: a session number is never reused, but a rerun must not shrink it, and the processes of a
        # sharded session (see delta_eval.executors) each append their own calls to the one file.
        fd = safe_paths.open_write(folder, _path(folder, session), truncate=False, append=True)
        self._fd: int | None = fd

    def record(self) -> None:
        """Count one call sent."""
        if self._fd is not None:
            os.write(self._fd, b".")

    def close(self) -> None:
        """Stop recording (the session has ended and its counts are in the manifest)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def sent_by(folder: Path, session: int) -> int | None:
    """How many calls session ``session`` sent (``None``: it kept no journal, e.g. it ran an older version)."""
    path = _path(folder, session)
    if path.is_symlink() or not path.is_file():
        return None
    return path.stat().st_size


def remove_journals(folder: Path) -> list[Path]:
    """Delete every journal (a run started afresh); returns what was removed."""
    directory = folder / SENT_DIR
    if directory.is_symlink() or not directory.is_dir():
        return []
    removed = [p for p in directory.iterdir() if _NAME.match(p.name) and p.is_file() and not p.is_symlink()]
    for p in removed:
        safe_paths.unlink(folder, p)
    if not any(directory.iterdir()):
        safe_paths.rmdir(folder, directory)
    return removed
