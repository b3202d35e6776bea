"""Damaged run folders: each damage is named, readers leave the damaged batch out, a rerun recomputes it."""

from __future__ import annotations

import json
import os
import sqlite3
import warnings
from pathlib import Path
from typing import Any

import pytest

import delta_eval as de
from delta_eval.analysis.report import render_report
from delta_eval.demo import demo_config, demo_conversations
from delta_eval.exceptions import RunFolderError, RunFolderWarning
from delta_eval.store.cache import SQLiteCache
from delta_eval.store.folder import Damage, RunFolder


def verdict(pair: str) -> de.Verdict:
    return de.Verdict(pair_id=pair, conversation_id="c", turn_index=0, stage="judge", outcome="tie")


def small(out: Path, **changes: Any) -> de.RunConfig:
    return demo_config(out, n=6, latency_ms=0.0).model_copy(update={"flush_every": 5, **changes})


def outcomes(path: Path) -> dict[str, str]:
    con = de.open_run(path)
    return dict(con.execute("SELECT pair_id, outcome FROM verdicts").fetchall())


def test_each_damage_is_named_and_its_batch_left_out(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path)
    for pair in "abcde":
        folder.add("verdicts", [verdict(pair)])
        folder.commit()
    part1 = tmp_path / "verdicts" / "part-000001.parquet"
    part1.write_bytes(part1.read_bytes()[:-20])  # truncated
    (tmp_path / "_commits" / "000002.json").unlink()  # a gap: batch 3 is committed
    (tmp_path / "_commits" / "000003.json").write_text("[1, 2]")  # not a commit record
    (tmp_path / "verdicts" / "part-000004.parquet").unlink()
    size = part1.stat().st_size
    assert RunFolder(tmp_path).damage() == [
        Damage(1, f"verdicts/part-000001.parquet is {size:,} bytes where its commit recorded {size + 20:,}"),
        Damage(2, "its commit file _commits/000002.json is missing"),
        Damage(3, "_commits/000003.json is not a commit record of this batch"),
        Damage(4, "verdicts/part-000004.parquet is missing"),
    ]
    assert RunFolder(tmp_path).read("verdicts").column("pair_id").to_pylist() == ["e"]
    assert part1.exists()  # reading never deletes


def test_a_commit_from_before_sizes_is_checked_for_a_whole_parquet_file(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path)
    folder.add("verdicts", [verdict("a")])
    folder.commit()
    commit = tmp_path / "_commits" / "000001.json"
    record = json.loads(commit.read_text())
    del record["sizes"]
    commit.write_text(json.dumps(record))
    assert RunFolder(tmp_path).damage() == []
    part = tmp_path / "verdicts" / "part-000001.parquet"
    part.write_bytes(part.read_bytes()[:100])
    assert RunFolder(tmp_path).damage() == [Damage(1, "verdicts/part-000001.parquet is not a whole Parquet file")]


def test_a_deleted_last_commit_of_a_completed_run_is_found_and_repaired(tmp_path: Path) -> None:
    out = tmp_path / "run"
    first = de.run(small(out), conversations=demo_conversations())
    before = outcomes(out)
    assert len(before) == first.counts.pairs
    last = first.manifest.batches
    assert last > 2
    (out / "_commits" / f"{last:06d}.json").unlink()

    result = de.open_result(out)
    assert result.damage == [Damage(last, f"its commit file _commits/{last:06d}.json is missing")]
    with pytest.warns(RunFolderWarning, match=f"batch {last}: its commit file"):
        assert len(outcomes(out)) < len(before)
    assert f"DAMAGED: {out} has 1 damaged batch" in render_report(result)

    again = de.run(small(out), conversations=demo_conversations())
    assert again.status == "completed"
    assert outcomes(out) == before
    session = again.manifest.sessions[-1]
    assert session.cache is not None
    assert session.cache.misses == 0  # nothing paid twice: every answer came from the cache
    assert session.pairs_decided == len(before) - again.manifest.sessions[-1].resumed_pairs > 0
    assert any(f"repaired: batch {last} was damaged" in n for n in again.manifest.notes)
    assert de.open_result(out).damage == []


def test_a_damaged_folders_warning_is_given_once_by_a_result_however_many_connections_it_opens(tmp_path: Path
                                                                                               ) -> None:  # fmt: skip
    """`delta-eval ci` takes the decision, then connects for the summary: one warning of the damage, not two."""
    out = tmp_path / "run"
    first = de.run(small(out), conversations=demo_conversations())
    (out / "_commits" / f"{first.manifest.batches:06d}.json").unlink()
    result = de.open_result(out)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # every warning given is recorded, however often
        result.decision()
        result.connect().close()
        result.decision()
    damage = [str(w.message) for w in caught if issubclass(w.category, RunFolderWarning)]
    assert len(damage) == 1
    assert "its commit file" in damage[0]
    with pytest.warns(RunFolderWarning, match="its commit file"):  # another result warns again
        de.open_result(out).connect().close()


def test_a_truncated_part_is_recomputed_by_a_rerun(tmp_path: Path) -> None:
    out = tmp_path / "run"
    de.run(small(out), conversations=demo_conversations())
    before = outcomes(out)
    part = out / "replays" / "part-000003.parquet"
    part.write_bytes(part.read_bytes()[: part.stat().st_size // 2])
    assert [d.batch for d in de.open_result(out).damage] == [3]
    again = de.run(small(out), conversations=demo_conversations())
    assert outcomes(out) == before
    con = de.open_run(out)
    assert con.execute("SELECT count(*), count(DISTINCT pair_id) FROM verdicts").fetchone() == (len(before),) * 2
    assert con.execute("SELECT count(*) FROM replays").fetchone() == (3 * len(before),)
    assert json.loads((out / "_commits" / "000003.json").read_text())["dropped"].startswith("replays/part-000003")
    assert again.counts.pairs == len(before)


DAMAGED_MANIFESTS = [b"\x00garbage\xff", b"[1, 2, 3]", b'{"status": "completed"}']


def strip_headers(out: Path) -> None:
    """Commit files as written before they carried the run's identity."""
    for commit in (out / "_commits").glob("*.json"):
        record = json.loads(commit.read_text())
        record.pop("run", None)
        commit.write_text(json.dumps(record))


@pytest.mark.parametrize("content", DAMAGED_MANIFESTS)
def test_a_damaged_manifest_is_rebuilt_from_the_commit_files(tmp_path: Path, content: bytes) -> None:
    out = tmp_path / "run"
    first = de.run(small(out), conversations=demo_conversations())
    before = outcomes(out)
    (out / "manifest.json").write_bytes(content)
    with pytest.warns(RunFolderWarning, match=r"manifest rebuilt from \d+ commit files: its manifest.json was damaged"):
        result = de.open_result(out)
    assert result.manifest.fingerprint == first.manifest.fingerprint
    assert result.manifest.batches == first.manifest.batches
    assert result.counts.pairs == first.counts.pairs
    assert result.counts.by_outcome == first.counts.by_outcome
    with pytest.warns(RunFolderWarning, match="manifest rebuilt"):
        assert outcomes(out) == before  # the intact batches are read
    with pytest.warns(RunFolderWarning, match="manifest rebuilt"):
        again = de.run(small(out), conversations=demo_conversations())  # resumes: nothing to overwrite
    assert again.status == "completed"
    assert again.manifest.sessions[-1].resumed_pairs == len(before)
    assert again.manifest.sessions[-1].cache is not None
    assert again.manifest.sessions[-1].cache.misses == 0
    assert any(n.startswith("manifest rebuilt") for n in again.manifest.notes)
    assert de.open_result(out).manifest.fingerprint == first.manifest.fingerprint  # whole again, no warning


@pytest.mark.parametrize("content", DAMAGED_MANIFESTS)
def test_a_damaged_manifest_with_old_commits_is_named_by_every_reader_and_a_rerun(
    tmp_path: Path, content: bytes
) -> None:
    out = tmp_path / "run"
    de.run(small(out), conversations=demo_conversations())
    strip_headers(out)
    (out / "manifest.json").write_bytes(content)
    for read in (de.open_result, de.open_run):
        with pytest.raises(RunFolderError, match=r"manifest.json is damaged"):
            read(out)
    with pytest.raises(RunFolderError, match=r"manifest.json is damaged.*--overwrite"):
        de.run(small(out), conversations=demo_conversations())
    again = de.run(small(out, overwrite=True), conversations=demo_conversations())
    assert again.status == "completed"
    assert again.manifest.sessions[-1].cache is not None
    assert again.manifest.sessions[-1].cache.misses == 0


def test_a_corrupt_cache_is_moved_aside_with_a_warning(tmp_path: Path) -> None:
    out = tmp_path / "run"
    de.run(small(out), conversations=demo_conversations())
    cache = out / "cache.sqlite"
    cache.write_bytes(b"this is not a database" * 100)
    for extra in ("-wal", "-shm"):
        Path(str(cache) + extra).unlink(missing_ok=True)
    with pytest.warns(RunFolderWarning, match="response cache .* is damaged"):
        again = de.run(small(out), conversations=demo_conversations())
    assert again.status == "completed"
    aside = [p for p in out.iterdir() if p.name.startswith("cache.sqlite.corrupt-")]
    assert len(aside) == 1
    assert aside[0].read_bytes().startswith(b"this is not a database")
    assert any("response cache was damaged" in n for n in again.manifest.notes)
    with sqlite3.connect(cache) as db:
        assert db.execute("SELECT count(*) FROM responses").fetchone() == (0,)  # resumed: nothing new to ask


def test_a_cache_that_is_sound_is_not_moved(tmp_path: Path) -> None:
    cache = SQLiteCache(tmp_path / "c.sqlite")
    cache.close()
    again = SQLiteCache(tmp_path / "c.sqlite")
    assert again.moved_aside is None
    again.close()
    assert not [name for name in os.listdir(tmp_path) if ".corrupt-" in name]


def checkpointed(cache: Path) -> bytes:
    """The cache file after a checkpoint (everything in the main file, no journal), as bytes."""
    db = sqlite3.connect(cache)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    for extra in ("-wal", "-shm"):
        Path(str(cache) + extra).unlink(missing_ok=True)
    return cache.read_bytes()


def garbage_pages(data: bytes) -> bytes:
    """Pages in the middle of the file overwritten, its header left whole (so it still opens)."""
    page = 4096
    middle = bytes((k * 7919) % 251 for k in range(page * 4))
    return data[: page * 3] + middle + data[page * 7 :]


@pytest.mark.parametrize("damage", ["truncated", "garbage pages"])
def test_a_cache_damaged_after_a_checkpoint_is_moved_aside(tmp_path: Path, damage: str) -> None:
    out = tmp_path / "run"
    config = small(out).model_copy(update={"sample": demo_config(out, n=30).sample})
    de.run(config, conversations=demo_conversations())
    cache = out / "cache.sqlite"
    data = checkpointed(cache)
    assert len(data) > 4096 * 8
    cache.write_bytes(data[: len(data) * 3 // 4] if damage == "truncated" else garbage_pages(data))
    (out / "_commits" / "000002.json").unlink()  # a batch to recompute: the cache is read
    with pytest.warns(RunFolderWarning, match="response cache .* is damaged"):
        again = de.run(config, conversations=demo_conversations())
    assert again.status == "completed"
    assert len([p for p in out.iterdir() if p.name.startswith("cache.sqlite.corrupt-")]) == 1
    assert any("response cache was damaged" in n for n in again.manifest.notes)
    assert de.open_result(out).damage == []
    assert de.open_run(out).execute("SELECT count(*) FROM verdicts").fetchone() == (again.counts.pairs,)
    third = de.run(config, conversations=demo_conversations())  # and the next run is as any other
    assert third.status == "completed"


def test_a_cache_page_damaged_while_the_run_uses_it_is_a_miss(tmp_path: Path) -> None:
    cache = SQLiteCache(tmp_path / "c.sqlite")
    response = de.ModelResponse(message=de.Message(role="assistant", content="x" * 3000))
    for k in range(40):
        cache.put(f"k{k}", "simulated:x", response)
    cache.close()
    data = checkpointed(tmp_path / "c.sqlite")
    cache = SQLiteCache(tmp_path / "c.sqlite")
    (tmp_path / "c.sqlite").write_bytes(garbage_pages(data))  # damaged under the open cache
    cache._db.close()  # a connection with none of its pages in memory yet
    cache._db = sqlite3.connect(tmp_path / "c.sqlite", isolation_level=None, check_same_thread=False)
    with pytest.warns(RunFolderWarning, match="lookups that reach the damage miss"):
        found = [cache.get(f"k{k}") for k in range(40)]
    assert None in found
    assert cache.damaged is not None
    cache.close()
