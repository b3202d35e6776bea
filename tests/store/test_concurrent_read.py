"""Readers of a run folder while a rerun drops batches: each reader sees one consistent snapshot (the batches
committed when it looked), or a clear error saying to read again, never a half-removed batch."""

from __future__ import annotations

import shutil
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import delta_eval as de
from delta_eval.demo import demo_config, demo_conversations
from delta_eval.exceptions import RunFolderChangedError
from delta_eval.store.folder import Damage, RunFolder
from delta_eval.store.tables import TABLES


@pytest.fixture
def run_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, int]:
    out = tmp_path / "run"
    monkeypatch.setattr(RunFolder, "compact", lambda self: [])  # left in many small batches, to drop one by one
    manifest = de.run(
        demo_config(out, n=24, latency_ms=0.0).model_copy(update={"flush_every": 2}), conversations=demo_conversations()
    ).manifest
    assert manifest.batches >= 8
    return out, manifest.counts.pairs


def churn(out: Path, stop: threading.Event, moved: list[int]) -> None:
    """What a rerun recomputing batches does, again and again: drop a batch, then commit its rows anew."""
    folder = RunFolder(out)
    folder.recover()
    while not stop.is_set():
        for commit in folder.commits():
            if stop.is_set():
                break
            rows = {
                name: [TABLES[name].parse(r) for rel in rels for r in pq.read_table(out / rel).to_pylist()]
                for name, rels in commit["files"].items()
            }
            folder.drop(int(commit["batch"]), "tried again")
            for name, objs in rows.items():
                folder.add(name, objs)
            folder.commit()
            moved.append(int(commit["batch"]))


@pytest.mark.slow
def test_readers_see_a_snapshot_while_a_rerun_drops_batches(run_folder: tuple[Path, int]) -> None:
    out, pairs = run_folder
    stop, moved = threading.Event(), list[int]()
    dropper = threading.Thread(target=churn, args=(out, stop, moved), daemon=True)
    problems: list[str] = []
    changed = 0
    dropper.start()
    deadline = time.monotonic() + 6
    try:
        while time.monotonic() < deadline and not problems:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("error")  # a half-removed batch would be reported as damage
                    result = de.open_result(out)
                    assert result.damage == []
                    table = result.table("verdicts").column("pair_id").to_pylist()
                    con = result.connect()
                    first = con.execute("SELECT count(*), count(DISTINCT pair_id) FROM verdicts").fetchone()
                    time.sleep(0.02)  # batches are dropped meanwhile: the connection's snapshot stays
                    again = con.execute("SELECT count(*), count(DISTINCT pair_id) FROM pairs").fetchone()
                    replays = con.execute("SELECT count(*) FROM replays").fetchone()
                    shutil.rmtree(out / "analysis", ignore_errors=True)  # computed afresh, during the drops
                    summary = de.analyze(result).summary(decision=False)
            except RunFolderChangedError:
                changed += 1  # clear and retryable: reading again is the answer
                continue
            except Exception as exc:
                problems.append(f"{type(exc).__name__}: {exc}")
                break
            if len(table) != len(set(table)) or len(table) > pairs:
                problems.append(f"table: {len(table)} rows, {len(set(table))} pairs")
            if first != again or first[0] != first[1] or not 0 < first[0] <= pairs:
                problems.append(f"views changed under one connection: {first} then {again}")
            if replays != (3 * first[0],):
                problems.append(f"{replays} replays for {first[0]} verdicts: a batch read in half")
            if not 0 < summary["pairs"] <= pairs:
                problems.append(f"the analysis counted {summary['pairs']} pairs")
            con.close()
    finally:
        stop.set()
        dropper.join(timeout=30)
    assert problems == []
    assert len(moved) > 5  # the dropper really was dropping batches throughout
    assert changed < 10
    final = de.open_result(out)
    assert final.damage == []
    assert final.table("verdicts").num_rows == pairs


def test_a_file_removed_under_a_reader_is_read_again_from_a_new_scan(run_folder: tuple[Path, int]) -> None:
    out, pairs = run_folder
    folder = RunFolder(out)
    victim = next(c for c in folder.commits() if "verdicts" in c["files"])
    real_scan = folder.scan
    calls = {"n": 0}

    def scan_then_drop() -> tuple[list[dict[str, Any]], list[Damage]]:
        found = real_scan()
        calls["n"] += 1
        if calls["n"] == 1:  # the first scan's files are then removed, as a rerun dropping them would
            writer = RunFolder(out)
            writer.drop(int(victim["batch"]), "tried again")
        return found

    folder.scan = scan_then_drop  # type: ignore[method-assign]
    verdicts = folder.read("verdicts")
    assert calls["n"] == 2
    assert verdicts.num_rows == pairs - victim["rows"]["verdicts"]


def test_a_folder_that_keeps_changing_says_to_read_again(run_folder: tuple[Path, int]) -> None:
    out, _ = run_folder
    folder = RunFolder(out)
    real_scan = folder.scan

    def scan_of_files_always_gone() -> tuple[list[dict[str, Any]], list[Damage]]:
        commits, damage = real_scan()
        return [{**c, "files": {"verdicts": ["verdicts/part-999999.parquet"]}} for c in commits], damage

    folder.scan = scan_of_files_always_gone  # type: ignore[method-assign]
    with pytest.raises(RunFolderChangedError, match=r"changed while it was read .*; read it again"):
        folder.read("verdicts")
