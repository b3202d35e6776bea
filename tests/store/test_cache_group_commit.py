"""The response cache's group commit: answers stored from an event loop wait a moment in memory, are found while they
wait, and are written together; the run writes them before its manifest counts them."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import delta_eval as de
import delta_eval.store.cache as cache_module
from delta_eval.store.cache import GROUP_ROWS, GROUP_WINDOW_S, SQLiteCache
from delta_eval.store.session import FolderSession


def answer(text: str) -> de.ModelResponse:
    return de.ModelResponse(message=de.Message(role="assistant", content=text))


def in_file(path: Path) -> set[str]:
    """The keys another connection (another process) finds in the file."""
    db = sqlite3.connect(path)
    try:
        return {row[0] for row in db.execute("SELECT key FROM responses")}
    finally:
        db.close()


def test_answers_stored_in_a_loop_are_found_at_once_and_written_within_the_window(tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite"
    cache = SQLiteCache(path)

    async def main() -> tuple[set[str], str | None, set[str]]:
        for k in range(3):
            cache.put(f"k{k}", "simulated:x", answer(f"a{k}"))
        assert cache.writes == 3  # a session reads its count before it closes the cache
        before = in_file(path)
        found = cache.get("k1")
        await asyncio.sleep(GROUP_WINDOW_S * 5)
        return before, found.message.content if found else None, in_file(path)

    before, found, after = asyncio.run(main())
    assert before == set()  # waiting, not yet in the file (and counted as stored all the same)
    assert found == "a1"  # but found all the same
    assert after == {"k0", "k1", "k2"}  # one transaction for the three
    assert cache.writes == 3
    cache.close()


def test_a_full_group_is_written_at_once(tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite"
    cache = SQLiteCache(path)

    async def main() -> set[str]:
        for k in range(GROUP_ROWS):
            cache.put(f"k{k}", "simulated:x", answer("a"))
        return in_file(path)

    assert len(asyncio.run(main())) == GROUP_ROWS
    cache.close()


def test_outside_a_loop_an_answer_is_written_at_once(tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite"
    cache = SQLiteCache(path)
    cache.put("k", "simulated:x", answer("a"))
    assert in_file(path) == {"k"}
    cache.close()


def test_closing_writes_the_waiting_answers(tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite"
    cache = SQLiteCache(path)

    async def main() -> None:
        cache.put("k", "simulated:x", answer("a"))
        cache.close()

    asyncio.run(main())
    assert in_file(path) == {"k"}
    again = SQLiteCache(path)
    assert len(again) == 1
    again.close()


def test_a_timed_writes_error_is_raised_by_the_next_put(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = SQLiteCache(tmp_path / "cache.sqlite")

    def full(rows: Any, **kw: Any) -> None:
        raise sqlite3.OperationalError("database or disk is full")

    async def main() -> None:
        cache.put("k", "simulated:x", answer("a"))
        monkeypatch.setattr(cache, "_write", full)
        await asyncio.sleep(GROUP_WINDOW_S * 5)
        with pytest.raises(sqlite3.OperationalError, match="disk is full"):
            cache.put("k2", "simulated:x", answer("b"))

    asyncio.run(main())
    monkeypatch.setattr(cache_module.SQLiteCache, "flush", lambda self: None)  # nothing more to write on close
    cache.close()


def test_a_batch_record_writes_the_waiting_answers_before_the_manifest(tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite"
    cache = SQLiteCache(path)
    seen: list[set[str]] = []
    session: Any = SimpleNamespace(
        cache=cache,
        manifest=SimpleNamespace(checkpoint=lambda batch, **kw: None),
        folder=SimpleNamespace(write_manifest=lambda manifest: seen.append(in_file(path))),
    )

    async def main() -> None:
        cache.put("k", "simulated:x", answer("a"))
        FolderSession.checkpoint(session, 1, pairs_decided=1, calls={})

    asyncio.run(main())
    assert seen == [{"k"}]  # the manifest that counts the answer is written after the answer is
    cache.close()
