"""The response cache: canonical responses kept by the hash of their canonical request.

SQLite rather than DuckDB because the cache is a key-value store written one row at a time by many concurrent
calls, read back by key, and must survive a process being killed mid-write: SQLite's WAL journal commits each row
durably on its own and lets another process read while this one writes, where DuckDB is built for analytical scans
and holds a single-writer lock on its file. The run's queryable outputs are Parquet, not this file.

Example:
    >>> import tempfile, pathlib
    >>> from delta_eval.schema import Message
    >>> from delta_eval.calls import ModelResponse
    >>> cache = SQLiteCache(pathlib.Path(tempfile.mkdtemp()) / "cache.sqlite")
    >>> cache.put("k", "simulated:x", ModelResponse(message=Message(role="assistant", content="hi")))
    >>> cache.get("k").message.content
    'hi'
    >>> cache.close()
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from pydantic import ValidationError

from delta_eval.calls import ModelResponse

__all__ = ["SQLiteCache"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    response TEXT NOT NULL,
    created REAL NOT NULL
)
"""


class SQLiteCache:
    """A response cache in one SQLite file, safe to share between runs (and between processes)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        # NORMAL keeps every committed row across a process kill (only a power cut may lose the last ones).
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(_SCHEMA)
        self.hits = 0
        self.misses = 0
        self.writes = 0

    def get(self, key: str) -> ModelResponse | None:
        """The response stored under ``key``; an unreadable entry counts as a miss."""
        row = self._db.execute("SELECT response FROM responses WHERE key = ?", (key,)).fetchone()
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
        """Store ``response`` under ``key`` (committed at once)."""
        self._db.execute(
            "INSERT OR REPLACE INTO responses (key, model, response, created) VALUES (?, ?, ?, ?)",
            (key, model, response.model_dump_json(), time.time()),
        )
        self.writes += 1

    def __len__(self) -> int:
        return int(self._db.execute("SELECT count(*) FROM responses").fetchone()[0])

    def close(self) -> None:
        """Close the file."""
        self._db.close()
