"""Where the shards of a sharded run leave their live counters in the run folder, and their removal.

    RUN_DIR/_progress/S-K.json     shard K of session S: its counters, spend and calls by model so far

Written by each shard and read by its session (see :mod:`delta_eval.executors.live`); removed when the session's
shards are done, and by :meth:`~delta_eval.store.folder.RunFolder.reset`.
"""

from __future__ import annotations

import re
from pathlib import Path

from delta_eval.store import safe_paths

__all__ = ["PROGRESS_DIR", "progress_file", "remove_progress"]

#: The folder of the shards' live counters, inside the run folder.
PROGRESS_DIR = "_progress"
# A shard's counters, and what an interrupted atomic write leaves beside them.
_NAME = re.compile(r"^(\d+-\d+\.json|\.\d+-\d+\.json\.[0-9a-f]{32}\.tmp)$")


def progress_file(root: Path, session: int, index: int) -> Path:
    """The counters file of shard ``index`` of session ``session`` in the run folder ``root``.

    Example:
        >>> progress_file(Path("run"), 2, 0).as_posix()
        'run/_progress/2-0.json'
    """
    return root / PROGRESS_DIR / f"{session}-{index}.json"


def remove_progress(root: Path) -> list[Path]:
    """Delete the shards' counter files (and their folder, once empty); returns what was removed. Files of other
    names are left where they are."""
    directory = root / PROGRESS_DIR
    if directory.is_symlink() or not directory.is_dir():
        return []
    removed = [p for p in directory.iterdir() if _NAME.match(p.name) and p.is_file() and not p.is_symlink()]
    for p in removed:
        safe_paths.unlink(root, p, missing_ok=True)
    if not any(directory.iterdir()):
        safe_paths.rmdir(root, directory)
    return removed
