"""The journal of provider batches a run submitted (``batches.jsonl`` in the run folder), so that a run killed while
a batch is being processed finds it again instead of paying for its requests twice.

A batch's requests are known by their response-cache keys. Each step is one appended JSON line, written before the
next step is taken: ``uploaded`` (the provider holds the input, under ``file``: nothing is billed yet), ``created``
(the batch exists, ``batch``: its requests will be billed), ``done`` (its results are in the response cache, or
reported as errors). A request whose key belongs to a batch not ``done`` is answered by that batch when the run
resumes, never sent again; an ``uploaded`` batch without ``created`` is looked for at the provider by its input (a
kill between the two steps) and created from the same input only if the provider has none. A provider that takes
the requests in the create call (nothing uploaded: the input is held in the process) journals ``uploaded`` just
before that call; when the resumed run finds no batch of it at the provider, the step ``dropped`` forgets it, and its
requests are sent again.

Each line is written with one unbuffered ``write`` to a file opened for appending: a killed process leaves whole
lines, and at worst a last line cut short, which is read as never written (the step is then taken again, which the
steps above allow).

Example:
    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> journal = BatchJournal(folder)
    >>> journal.uploaded("openai:gpt-4.1", "file-1", ["k1", "k2"])
    >>> journal.created("file-1", "batch_1")
    >>> journal.close()
    >>> again = BatchJournal(folder)
    >>> again.pending("openai:gpt-4.1", "k2")
    PendingBatch(model='openai:gpt-4.1', file='file-1', keys=('k1', 'k2'), batch='batch_1')
    >>> again.done("batch_1"); again.pending("openai:gpt-4.1", "k2") is None
    True
    >>> again.uploaded("openai:gpt-4.1", "file-2", ["k3"]); again.dropped("file-2")
    >>> again.pending("openai:gpt-4.1", "k3") is None
    True
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from delta_eval.store import safe_paths

__all__ = ["BATCHES_FILE", "BatchJournal", "PendingBatch"]

#: The journal's file name inside a run folder.
BATCHES_FILE = "batches.jsonl"


@dataclass(frozen=True)
class PendingBatch:
    """A batch not yet ``done``: its model, input file, request keys and (once created) the provider's batch id."""

    model: str
    file: str
    keys: tuple[str, ...]
    batch: str | None = None


class BatchJournal:
    """The batches of one run folder: read at open, appended to as batches move on."""

    def __init__(self, folder: Path) -> None:
        self._folder = Path(folder)
        path = self._folder / BATCHES_FILE
        self._by_file: dict[str, PendingBatch] = {}
        self._by_key: dict[tuple[str, str], str] = {}  # (model, key) -> file of the pending batch holding it
        torn = False
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            torn = bool(data) and not data.endswith(b"\n")
            for line in data.splitlines():
                try:
                    self._apply(json.loads(line))
                except (ValueError, KeyError, TypeError):
                    continue  # a line cut short by a kill: its step was not taken
        fd = safe_paths.open_write(self._folder, path, truncate=False)
        os.lseek(fd, 0, os.SEEK_END)
        if torn:
            os.write(fd, b"\n")  # ends the line cut short, so that the next step is a line of its own
        self._fd: int | None = fd

    def _apply(self, event: dict[str, object]) -> None:
        step = event["step"]
        if step == "uploaded":
            keys = event["keys"]
            assert isinstance(keys, list)
            pending = PendingBatch(str(event["model"]), str(event["file"]), tuple(str(k) for k in keys))
            self._by_file[pending.file] = pending
            for key in pending.keys:
                self._by_key[(pending.model, key)] = pending.file
        elif step == "created" and str(event["file"]) in self._by_file:
            self._by_file[str(event["file"])] = replace(self._by_file[str(event["file"])], batch=str(event["batch"]))
        elif step == "done":
            for file, pending in list(self._by_file.items()):
                if pending.batch == event["batch"]:
                    self._forget(file)
        elif step == "dropped" and str(event["file"]) in self._by_file:
            self._forget(str(event["file"]))

    def _forget(self, file: str) -> None:
        pending = self._by_file.pop(file)
        for key in pending.keys:
            if self._by_key.get((pending.model, key)) == file:
                del self._by_key[(pending.model, key)]

    def _write(self, event: dict[str, object]) -> None:
        self._apply(event)
        if self._fd is not None:
            os.write(self._fd, json.dumps(event, separators=(",", ":")).encode() + b"\n")

    def pending(self, model: str, key: str) -> PendingBatch | None:
        """The batch not yet done that holds request ``key`` of ``model``, if any."""
        file = self._by_key.get((model, key))
        return self._by_file.get(file) if file is not None else None

    def uploaded(self, model: str, file: str, keys: Sequence[str]) -> None:
        """The provider holds the input ``file`` of a batch of ``keys``."""
        self._write({"step": "uploaded", "model": model, "file": file, "keys": list(keys)})

    def created(self, file: str, batch: str) -> None:
        """The provider created batch ``batch`` from ``file``."""
        self._write({"step": "created", "file": file, "batch": batch})

    def dropped(self, file: str) -> None:
        """No batch was created from ``file`` (the provider has none): its requests are free to be sent again."""
        self._write({"step": "dropped", "file": file})

    def done(self, batch: str) -> None:
        """The results of ``batch`` are in the response cache (or were reported as errors)."""
        self._write({"step": "done", "batch": batch})

    def close(self) -> None:
        """Stop writing (reading what was read stays possible)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
