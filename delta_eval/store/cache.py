"""The response cache: canonical responses kept by the hash of their canonical request.

SQLite rather than DuckDB because the cache is a key-value store written a few rows at a time by many concurrent
calls, read back by key, and must survive a process being killed mid-write: SQLite's WAL journal commits each
transaction durably on its own and lets another process read while this one writes, where DuckDB is built for
analytical scans and holds a single-writer lock on its file. The run's queryable outputs are Parquet, not this file.

An answer kept on an asyncio event loop is committed with the others kept in the same turn of the loop, in one
transaction once the turn's callbacks have run (a turn of a run at 256 calls in flight hands over a few to a few
dozen answers; a transaction a row cost ~40 us of CPU, three times a row's share of a larger one): a kill between
the two loses the answers of that turn, as a kill a moment earlier would have. Elsewhere each is committed at once.
Whoever records how many answers a run got commits them first (:meth:`SQLiteCache.flush`): a killed session's
answers found in the cache are then every one it had not recorded (see
:meth:`~delta_eval.store.manifest.RunManifest.begin_session`).

Example:
    >>> import tempfile, pathlib
    >>> from delta_eval.schema import Message
    >>> from delta_eval.calls import CACHE_KEY_VERSION, CallStats, ModelResponse
    >>> cache = SQLiteCache(pathlib.Path(tempfile.mkdtemp()) / "cache.sqlite")
    >>> cache.put("k", "simulated:x", ModelResponse(message=Message(role="assistant", content="hi")))
    >>> cache.get("k").message.content
    'hi'
    >>> cache.close()
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
import time
import warnings
from collections.abc import Mapping
from pathlib import Path

from pydantic import ValidationError

from delta_eval.calls import CACHE_KEY_VERSION, CallStats, ModelResponse
from delta_eval.exceptions import RunFolderWarning
from delta_eval.store import safe_paths

__all__ = ["SQLiteCache", "refuse_linked_cache"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    response TEXT NOT NULL,
    created REAL NOT NULL
)
"""
_INSERT = "INSERT OR REPLACE INTO responses (key, model, response, created) VALUES (?, ?, ?, ?)"


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
        #: Answers committed (those kept and not yet committed are not counted: :meth:`flush` commits them).
        self.writes = 0
        self._pending: dict[str, tuple[str, str, str, float]] = {}  # key -> row, kept this turn of the loop
        self._flushing: asyncio.AbstractEventLoop | None = None  # the loop a commit of them is scheduled on
        self._failure: sqlite3.OperationalError | None = None  # why the answers kept cannot be committed
        self._lock = threading.Lock()  # one transaction at a time on the shared connection

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
        """The response stored under ``key`` (kept and not yet committed too); an unreadable entry counts as a
        miss."""
        kept = self._pending.get(key)
        if kept is not None:
            row: tuple[str] | None = (kept[2],)
        else:
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
        """Store ``response`` under ``key``: committed at once, or on an asyncio event loop at the end of the loop's
        turn (see the module docstring). While answers kept before cannot be committed (a full disk, a lock held too
        long), every put tries them again first and raises why they cannot, keeping nothing more, as a put that fails
        at once does."""
        if self._failure is not None:
            self.flush()  # raises while they still cannot be committed
        row = (key, model, response.model_dump_json(), time.time())
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        with self._lock:
            self._pending[key] = row
        if loop is None:
            self.flush()
        elif self._flushing is not loop:
            self._flushing = loop
            loop.call_soon(self._scheduled)

    def _scheduled(self) -> None:
        self._flushing = None
        with contextlib.suppress(sqlite3.OperationalError):  # kept in _failure: raised by the next put
            self.flush()

    def flush(self) -> None:
        """Commit the answers kept and not yet committed: in one transaction, or where that fails (but for a lock held
        by another process) one by one, as many as fit (the others stay kept; why they cannot be is raised, and by
        every put until they are). Safe from any thread."""
        with self._lock:
            if not self._pending:
                return
            rows = list(self._pending.values())
            try:
                if len(rows) > 1 and self._committed_together(rows):
                    self.writes += len(rows)
                    self._pending.clear()
                else:  # one by one: as many as fit
                    for row in rows:
                        self._db.execute(_INSERT, row)
                        self.writes += 1
                        del self._pending[row[0]]
                self._failure = None
            except sqlite3.OperationalError as exc:
                self._failure = exc
                raise
            except sqlite3.DatabaseError as exc:
                self._damaged(exc)  # the answers are still used; only their keeping is lost
                self._pending.clear()
                self._failure = None

    def _committed_together(self, rows: list[tuple[str, str, str, float]]) -> bool:
        """Commit ``rows`` in one transaction; ``False`` where it fails but for a lock another process holds past
        the timeout, which is raised (one by one would wait as long again, for each): a full disk (SQLITE_FULL, or
        an I/O error where a quota or a file-size limit is reached) keeps as many as fit one by one."""
        try:
            # IMMEDIATE: the write lock taken (or waited for) at once, not at the first INSERT.
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany(_INSERT, rows)
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
        except sqlite3.OperationalError as exc:
            if getattr(exc, "sqlite_errorcode", 0) & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
                raise
            return False
        return True

    def committed_counts(self, calls: Mapping[str, CallStats]) -> dict[str, CallStats]:
        """Copies of the live call counters ``calls`` of the clients keeping their answers here, taken before the
        answers kept are committed: every answer they count as got is then in the cache, which is what a record of
        them (a session's checkpoint, a shard's published counters) may say. Raises as :meth:`flush` does."""
        copied = {name: stats.model_copy() for name, stats in calls.items()}
        self.flush()
        return copied

    def stats(self) -> tuple[int, int, int]:
        """Hits, misses and answers committed (:attr:`writes`), once the answers kept are committed (those that
        cannot be are left to :meth:`close`, which says so)."""
        with contextlib.suppress(sqlite3.OperationalError):
            self.flush()
        return self.hits, self.misses, self.writes

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
        return int(self._db.execute("SELECT count(*) FROM responses").fetchone()[0])

    def close(self) -> None:
        """Commit the answers kept and close the file. Answers that cannot be committed (a full disk) are said in a
        warning, not raised: the session that closes the cache has its own error to report, and a rerun asks for
        them again."""
        try:
            self.flush()
        except sqlite3.OperationalError as exc:
            warnings.warn(
                f"the response cache {self.path} could not keep the last {len(self._pending)} answers ({exc}); a "
                "rerun asks for them again",
                RunFolderWarning,
                stacklevel=2,
            )
        self._pending.clear()
        self._db.close()
