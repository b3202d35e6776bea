"""The response cache: canonical responses kept by the hash of their canonical request.

SQLite rather than DuckDB because the cache is a key-value store written one row at a time by many concurrent
calls, read back by key, and must survive a process being killed mid-write: SQLite's WAL journal commits rows
durably and lets another process read while this one writes, where DuckDB is built for analytical scans and holds a
single-writer lock on its file. The run's queryable outputs are Parquet, not this file.

Group commit: an answer stored from inside a running event loop (every call of a run) waits in memory up to
:data:`GROUP_WINDOW_S` (or until :data:`GROUP_ROWS` wait) and is written with the others in one transaction: a
commit per answer cost about half of the cache's CPU. Waiting answers are found by :meth:`SQLiteCache.get` as
written ones are; the file's write lock is held only while they are written, never while they wait (another process
sharing the file writes in between). The run writes them (:meth:`SQLiteCache.flush`) before it records a batch in its
manifest and when it closes the cache, so the manifest never counts an answer the file does not hold. A process
killed meanwhile loses the answers of that last window: the journal of calls sent counts them as lost at the kill,
and a rerun asks for them again. An answer stored outside an event loop is written at once.

Example:
    >>> import tempfile, pathlib
    >>> from delta_eval.schema import Message
    >>> from delta_eval.calls import CACHE_KEY_VERSION, ModelResponse
    >>> cache = SQLiteCache(pathlib.Path(tempfile.mkdtemp()) / "cache.sqlite")
    >>> cache.put("k", "simulated:x", ModelResponse(message=Message(role="assistant", content="hi")))
    >>> cache.get("k").message.content
    'hi'
    >>> cache.close()
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
import warnings
from pathlib import Path

from pydantic import ValidationError

from delta_eval.calls import CACHE_KEY_VERSION, ModelResponse
from delta_eval.exceptions import RunFolderWarning
from delta_eval.store import safe_paths

__all__ = ["GROUP_ROWS", "GROUP_WINDOW_S", "SQLiteCache", "refuse_linked_cache"]

#: The longest an answer stored from an event loop waits before it is written (seconds), and how many may wait.
GROUP_WINDOW_S = 0.02
GROUP_ROWS = 64

_INSERT = "INSERT OR REPLACE INTO responses (key, model, response, created) VALUES (?, ?, ?, ?)"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    response TEXT NOT NULL,
    created REAL NOT NULL
)
"""


def refuse_linked_cache(path: Path, root: Path | None) -> None:
    """Refuse a cache inside the run folder ``root`` that is a symbolic link, or whose journal files are (SQLite
    writes all of them); a cache outside the folder is not checked."""
    if root is not None and safe_paths.inside(root, path):
        for suffix in ("", "-wal", "-shm", "-journal"):
            safe_paths.check(root, path.with_name(path.name + suffix))


class SQLiteCache:
    """A response cache in one SQLite file, safe to share between runs (and between processes).

    ``root`` is the run folder: a cache inside it is never opened through a symbolic link (SQLite would follow it
    and write its table into whatever the link points at). A cache configured outside the folder is the user's
    choice and is opened where it is.
    """

    def __init__(self, path: Path, *, root: Path | None = None) -> None:
        self.path = Path(path)
        self._root = root if root is not None and safe_paths.inside(root, self.path) else None
        refuse_linked_cache(self.path, root)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        #: Whether the file holds answers keyed under cache key version 1 (written before version 2): a lookup
        #: that misses is tried with the old key (see :meth:`~delta_eval.adapters.client.ModelClient.generate`).
        self.holds_v1_keys = False
        #: Where a corrupt cache file found at this path was moved (``None``: it was sound, or new).
        self.moved_aside: Path | None = None
        try:
            self._db = self._open()
        except sqlite3.DatabaseError as exc:
            # A damaged cache costs answers, never the run: keep the file for inspection and start an empty one.
            self.moved_aside = self.path.with_name(f"{self.path.name}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}")
            for suffix in ("", "-wal", "-shm"):
                damaged = self.path.with_name(self.path.name + suffix)
                if damaged.exists():
                    aside = self.moved_aside.with_name(self.moved_aside.name + suffix)
                    if self._root is not None:
                        safe_paths.rename(self._root, damaged, aside)
                    else:
                        damaged.rename(aside)
            warnings.warn(
                f"the response cache {self.path} is damaged ({exc}); it was moved to {self.moved_aside} and an "
                "empty cache started (answers it held will be asked for again)",
                RunFolderWarning,
                stacklevel=2,
            )
            self._db = self._open()
        #: What damage the run found in the cache after it opened (``None``: none).
        self.damaged: str | None = None
        self.hits = 0
        self.misses = 0
        self.writes = 0
        #: Answers waiting to be written, by key, and those a flush is writing (both found by get).
        self._waiting: dict[str, tuple[ModelResponse, tuple[str, str, str, float]]] = {}
        self._writing: dict[str, tuple[ModelResponse, tuple[str, str, str, float]]] = {}
        self._rows_lock = threading.Lock()  # the two dicts, between the run's loop and its commit thread
        self._flush_lock = threading.Lock()  # one writer of the connection at a time
        self._timer_loop: asyncio.AbstractEventLoop | None = None  # the loop whose timer will flush the waiting
        self._failed: Exception | None = None  # a timed flush's error, for the next put to raise

    def _open(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            # NORMAL keeps every committed row across a process kill (only a power cut may lose the last ones).
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute(_SCHEMA)
            # Every page, not only the header and the table's: a file damaged after a checkpoint (garbage pages, a
            # truncated file) otherwise opens and fails some later lookup, and so every rerun. Linear in the file's
            # size (a second or so a gigabyte), once a session.
            problems = [row[0] for row in db.execute("PRAGMA quick_check(3)").fetchall()]
            if problems != ["ok"]:
                raise sqlite3.DatabaseError(f"database disk image is malformed: {'; '.join(problems)[:200]}")
            # The key version its rows were written under (SQLite's user_version, 0 before version 2): an empty
            # cache is marked with today's; one written before keeps its mark, and is read with the old keys too.
            if db.execute("PRAGMA user_version").fetchone()[0] < CACHE_KEY_VERSION:
                if db.execute("SELECT 1 FROM responses LIMIT 1").fetchone() is None:
                    db.execute(f"PRAGMA user_version = {int(CACHE_KEY_VERSION)}")
                else:
                    self.holds_v1_keys = True
        except sqlite3.DatabaseError:
            db.close()
            raise
        return db

    def get(self, key: str) -> ModelResponse | None:
        """The response stored under ``key`` (written, or waiting to be); an unreadable entry counts as a miss."""
        if self._waiting or self._writing:
            with self._rows_lock:
                kept = self._waiting.get(key) or self._writing.get(key)
            if kept is not None:
                self.hits += 1
                return kept[0]  # frozen: the caller cannot change what the cache keeps
        try:
            row = self._db.execute("SELECT response FROM responses WHERE key = ?", (key,)).fetchone()
        except sqlite3.OperationalError:
            raise  # a full disk, a lock held too long: the run's to report
        except sqlite3.DatabaseError as exc:
            self._damaged(exc)
            row = None
        if row is None:
            self.misses += 1
            return None
        try:
            response = ModelResponse.model_validate_json(row[0])
        except ValidationError:
            self.misses += 1
            return None
        self.hits += 1
        return response

    def put(self, key: str, model: str, response: ModelResponse) -> None:
        """Store ``response`` under ``key``: written at once outside an event loop; inside one, within
        :data:`GROUP_WINDOW_S` with the answers stored meanwhile (see the module's docstring)."""
        if self._failed is not None:
            failed, self._failed = self._failed, None
            raise failed  # a timed flush's full disk or lock held too long: the run's to report
        row = (key, model, response.model_dump_json(), time.time())
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is None:
            with self._flush_lock:  # not inside another thread's transaction of waiting answers
                self._write([row])
            return
        with self._rows_lock:
            self._waiting[key] = (response, row)
            waiting = len(self._waiting)
        self.writes += 1  # counted as stored, as one written at once is (a session's stats are read before close)
        if waiting >= GROUP_ROWS:
            self.flush()
        elif self._timer_loop is not loop:
            self._timer_loop = loop
            loop.call_later(GROUP_WINDOW_S, self._timed_flush)

    def _timed_flush(self) -> None:
        self._timer_loop = None
        try:
            self.flush()
        except Exception as exc:  # raised in the loop's timer, where no caller would see it: the next put raises it
            self._failed = exc

    def flush(self) -> None:
        """Write the answers waiting to be written, in one transaction."""
        with self._flush_lock:
            with self._rows_lock:
                if not self._waiting:
                    return
                self._writing, self._waiting = self._waiting, {}
            try:
                self._write([row for _, row in self._writing.values()], counted=True)
            finally:
                with self._rows_lock:
                    self._writing = {}

    def _write(self, rows: list[tuple[str, str, str, float]], *, counted: bool = False) -> None:
        """Write ``rows`` in one transaction; ``counted``: their :attr:`writes` were counted when they were stored
        (taken back if the file is found damaged)."""
        try:
            if len(rows) == 1:
                self._db.execute(_INSERT, rows[0])  # a transaction of its own
            else:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    self._db.executemany(_INSERT, rows)
                    self._db.execute("COMMIT")
                except BaseException:
                    if self._db.in_transaction:
                        self._db.execute("ROLLBACK")
                    raise
        except sqlite3.OperationalError:
            raise
        except sqlite3.DatabaseError as exc:
            self._damaged(exc)  # the answers are still used; only their keeping is lost
            self.writes -= len(rows) if counted else 0
            return
        self.writes += 0 if counted else len(rows)

    def _damaged(self, exc: sqlite3.DatabaseError) -> None:
        """A page found damaged while the run uses the cache: lookups there miss, and the next session's check at
        open moves the file aside. Said once."""
        if self.damaged is None:
            self.damaged = str(exc)
            warnings.warn(
                f"the response cache {self.path} is damaged ({exc}); lookups that reach the damage miss, and the next "
                "run moves the file aside",
                RunFolderWarning,
                stacklevel=3,
            )

    def __len__(self) -> int:
        self.flush()
        return int(self._db.execute("SELECT count(*) FROM responses").fetchone()[0])

    def close(self) -> None:
        """Write the answers waiting to be written and close the file."""
        try:
            self.flush()
        finally:
            self._db.close()
