"""The response cache commits the answers kept in one turn of an event loop together, at the turn's end; each at
once elsewhere. Answers kept and not yet committed are found by a lookup, a commit that fails is raised by the next
answer kept and tried again, and closing the cache commits what is kept (or says what could not be)."""

from __future__ import annotations

import asyncio
import sqlite3
import warnings
from pathlib import Path

import pytest

from delta_eval.calls import ModelResponse
from delta_eval.exceptions import RunFolderWarning
from delta_eval.schema import Message
from delta_eval.store.cache import SQLiteCache


def _answer(text: str) -> ModelResponse:
    return ModelResponse(message=Message(role="assistant", content=text))


def _stored(path: Path) -> dict[str, str]:
    """What another connection reads in the file: each key's stored response text."""
    with sqlite3.connect(path) as other:
        return dict(other.execute("SELECT key, response FROM responses").fetchall())


def _transactions(cache: SQLiteCache) -> list[int]:
    """The rows of each transaction the cache commits from now on, from the statements SQLite runs: an INSERT
    outside BEGIN ... COMMIT is a transaction of its own."""
    sizes: list[int] = []
    inside: list[int] = []

    def note(sql: str) -> None:
        if sql.startswith("BEGIN"):
            inside.append(0)
        elif sql.startswith("INSERT") and inside:
            inside[-1] += 1
        elif sql.startswith("INSERT"):
            sizes.append(1)
        elif sql == "COMMIT":
            sizes.append(inside.pop())

    cache._db.set_trace_callback(note)
    return sizes


def _last_turn(*puts: tuple[SQLiteCache, str]) -> None:
    """Keep answers in a turn of a loop that stops at its end, before the commit scheduled for them runs."""
    loop = asyncio.new_event_loop()

    def turn() -> None:
        for cache, key in puts:
            cache.put(key, "m", _answer(key))
        loop.stop()  # (callbacks scheduled by this one do not run)

    loop.call_soon(turn)
    loop.run_forever()
    loop.close()


def test_without_an_event_loop_each_answer_is_committed_at_once(tmp_path: Path) -> None:
    cache = SQLiteCache(tmp_path / "cache.sqlite")
    sizes = _transactions(cache)
    cache.put("a", "m", _answer("one"))
    assert set(_stored(tmp_path / "cache.sqlite")) == {"a"}
    cache.put("b", "m", _answer("two"))
    assert set(_stored(tmp_path / "cache.sqlite")) == {"a", "b"}
    assert sizes == [1, 1]
    assert cache.writes == 2
    cache.close()


def test_the_answers_of_one_turn_of_the_loop_are_committed_together_at_its_end(tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite"
    cache = SQLiteCache(path)
    sizes = _transactions(cache)

    async def main() -> None:
        for k in range(5):
            cache.put(f"k{k}", "m", _answer(f"answer {k}"))
        assert _stored(path) == {}  # not yet: at the end of this turn
        assert cache.get("k3") is not None  # kept all the same
        assert cache.get("k3").message.content == "answer 3"  # type: ignore[union-attr]
        await asyncio.sleep(0)
        assert set(_stored(path)) == {f"k{k}" for k in range(5)}
        cache.put("k1", "m", _answer("again"))  # a turn of one answer: one row, replaced
        await asyncio.sleep(0)

    asyncio.run(main())
    assert sizes == [5, 1]
    assert cache.writes == 6
    assert cache.get("k1").message.content == "again"  # type: ignore[union-attr]
    assert (cache.hits, cache.misses) == (3, 0)
    cache.close()


def test_answers_kept_in_the_last_turn_are_committed_by_stats_or_close(tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite"
    cache = SQLiteCache(path)
    _last_turn((cache, "x"), (cache, "y"))
    assert _stored(path) == {}
    assert cache.stats() == (0, 0, 2)
    assert set(_stored(path)) == {"x", "y"}
    cache.close()

    again = SQLiteCache(path)
    _last_turn((again, "z"))
    assert set(_stored(path)) == {"x", "y"}
    again.close()
    assert set(_stored(path)) == {"x", "y", "z"}


def test_a_commit_that_fails_is_raised_by_the_next_answer_kept_and_tried_again(tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite"
    cache = SQLiteCache(path)
    cache._db.execute("PRAGMA busy_timeout = 10")  # fail fast while another writer holds the file
    other = sqlite3.connect(path, isolation_level=None)

    async def main() -> None:
        other.execute("BEGIN IMMEDIATE")  # another process writing: SQLite's lock held
        cache.put("a", "m", _answer("a"))
        cache.put("b", "m", _answer("b"))
        sent: list[str] = []
        cache._db.set_trace_callback(sent.append)
        await asyncio.sleep(0)  # the commit fails: "database is locked"
        cache._db.set_trace_callback(None)
        assert sent == ["BEGIN IMMEDIATE"]  # tried once: not each answer again, each waiting for the lock
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            cache.put("c", "m", _answer("c"))
        assert cache.get("a") is not None  # still kept
        other.execute("COMMIT")
        cache.put("d", "m", _answer("d"))
        await asyncio.sleep(0)

    asyncio.run(main())
    assert set(_stored(path)) == {"a", "b", "d"}  # "c" failed with the error, as a put that fails at once does
    assert cache.writes == 3
    other.execute("BEGIN IMMEDIATE")
    _last_turn((cache, "e"))
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        cache.close()
    other.execute("COMMIT")
    other.close()
    assert [str(w.message) for w in said if issubclass(w.category, RunFolderWarning)] == [
        f"the response cache {path} could not keep the last 1 answers (database is locked); a rerun asks for them again"
    ]
    assert "e" not in _stored(path)


def test_a_nearly_full_file_keeps_as_many_answers_as_fit_and_every_later_answer_raises(tmp_path: Path) -> None:
    """A turn's answers that do not fit in one transaction are committed one by one, as many as fit (as when each
    was committed at once); while the others cannot be, every answer kept raises why, keeping nothing more (the
    calls fail, as they failed when each put failed at once), rather than answers paid for and held in memory."""
    path = tmp_path / "cache.sqlite"
    cache = SQLiteCache(path)
    used = cache._db.execute("PRAGMA page_count").fetchone()[0]
    cache._db.execute(f"PRAGMA max_page_count = {used + 6}")  # room for a few answers of ~2 KB
    big = "x" * 2000
    raised: list[str] = []

    async def main() -> None:
        for k in range(12):
            cache.put(f"k{k}", "m", _answer(big + str(k)))
        await asyncio.sleep(0)  # the turn's commit: too big for what is left
        for k in range(12, 20):
            try:
                cache.put(f"k{k}", "m", _answer(big + str(k)))
            except sqlite3.OperationalError as exc:
                raised.append(str(exc))

    asyncio.run(main())
    stored = _stored(path)
    assert 0 < len(stored) < 12  # as many as fit, one by one
    assert cache.writes == len(stored)
    assert raised == ["database or disk is full"] * 8  # every later answer, none of them kept
    assert not set(stored) & {f"k{k}" for k in range(12, 20)}
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        cache.close()
    assert [str(w.message) for w in said] == [
        f"the response cache {path} could not keep the last {12 - len(stored)} answers (database or disk is full); "
        "a rerun asks for them again"
    ]


def test_answers_kept_on_the_loop_while_another_thread_commits_are_each_committed_once(tmp_path: Path) -> None:
    """The session's checkpoint (on a worker thread) commits the answers kept before it records their count, while
    the loop keeps more: none is lost or counted twice."""
    import threading

    path = tmp_path / "cache.sqlite"
    cache = SQLiteCache(path)
    done = threading.Event()

    def checkpoints() -> None:
        while not done.is_set():
            cache.stats()

    async def main() -> None:
        for k in range(20000):
            cache.put(f"k{k}", "m", _answer(str(k) * 300))  # (long answers: long commits, the thread's in them)
            if k % 500 == 0:
                await asyncio.sleep(0)

    other = threading.Thread(target=checkpoints)
    other.start()
    try:
        asyncio.run(main())
    finally:
        done.set()
        other.join()
    cache.close()
    assert len(_stored(path)) == 20000
    assert cache.writes == 20000


_FILE_SIZE_LIMITED = """
import asyncio, os, resource, signal, sqlite3, sys
from delta_eval.calls import ModelResponse
from delta_eval.schema import Message
from delta_eval.store.cache import SQLiteCache

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead of killing
path = sys.argv[1]
SQLiteCache(path).close()
cache = SQLiteCache(path)
used = sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))
resource.setrlimit(resource.RLIMIT_FSIZE, (used + 40_000, resource.RLIM_INFINITY))
raised = []

async def main():
    for k in range(12):
        cache.put(f"k{k}", "m", ModelResponse(message=Message(role="assistant", content="x" * 6000 + str(k))))
    await asyncio.sleep(0)
    try:
        cache.put("last", "m", ModelResponse(message=Message(role="assistant", content="y")))
    except sqlite3.OperationalError as exc:
        raised.append(exc.sqlite_errorcode & 0xFF)

asyncio.run(main())
print(cache.writes, len(cache._pending), raised == [sqlite3.SQLITE_IOERR])
"""


def test_a_file_size_limit_keeps_as_many_answers_as_fit(tmp_path: Path) -> None:
    """A quota or a file-size limit is an I/O error to SQLite, not a full disk: as many answers as fit are kept
    all the same, and why the others cannot be is raised (a child process: the limit is the whole process's)."""
    import subprocess
    import sys

    pytest.importorskip("resource")  # (POSIX)

    done = subprocess.run([sys.executable, "-c", _FILE_SIZE_LIMITED, str(tmp_path / "cache.sqlite")],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    writes, pending, raised = done.stdout.split()
    assert int(writes) >= 1  # some fit (none were kept when only SQLITE_FULL was tried one by one)
    assert int(writes) + int(pending) == 12
    assert raised == "True"
