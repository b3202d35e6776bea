"""A run folder proves it is one, is written by one process at a time, and only the library's files are ever
removed from it."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import delta_eval as de
from delta_eval.demo import demo_config, demo_conversations
from delta_eval.exceptions import RunFolderError
from delta_eval.store import folder as folder_module
from delta_eval.store.folder import MARKER, FolderLock, RunFolder
from delta_eval.store.session import differences


def small(out: Path, n: int = 3, **changes: Any) -> de.RunConfig:
    cfg = demo_config(out, n=n, latency_ms=0.0)
    return cfg.model_copy(update=changes) if changes else cfg


def test_a_folder_holding_someone_elses_manifest_is_never_touched(tmp_path: Path) -> None:
    app = tmp_path / "webapp"
    (app / "replays").mkdir(parents=True)
    (app / "replays" / "index.html").write_text("<html/>")
    (app / "manifest.json").write_text(json.dumps({"name": "my web app", "icons": []}))
    before = sorted(p.relative_to(app).as_posix() for p in app.rglob("*"))
    for overwrite in (False, True):
        with pytest.raises(RunFolderError, match="not a delta_eval run folder"):
            de.run(small(app, overwrite=overwrite), conversations=demo_conversations())
    assert sorted(p.relative_to(app).as_posix() for p in app.rglob("*")) == before
    assert (app / "replays" / "index.html").read_text() == "<html/>"
    with pytest.raises(RunFolderError, match="not a delta_eval run folder"):
        RunFolder(app).reset()


def test_a_run_folder_carries_the_marker(tmp_path: Path) -> None:
    result = de.run(small(tmp_path / "run"), conversations=demo_conversations())
    marker = json.loads((result.path / MARKER).read_text())
    assert marker == {"library": "delta_eval", "format": "delta_eval.run/1"}
    assert RunFolder(result.path).is_marked()


def test_a_config_mismatch_is_refused_naming_the_fields_that_differ(tmp_path: Path) -> None:
    de.run(small(tmp_path / "run", n=3), conversations=demo_conversations())
    with pytest.raises(RunFolderError, match=r"differs in: .*sample\.n") as info:
        de.run(small(tmp_path / "run", n=4, seed=5), conversations=demo_conversations())
    assert "seed" in str(info.value)
    assert "--overwrite" in str(info.value)


def test_overwrite_removes_only_what_the_library_wrote(tmp_path: Path) -> None:
    out = tmp_path / "run"
    first = de.run(small(out, n=3), conversations=demo_conversations())
    (out / "notes.md").write_text("my notes")
    (out / "verdicts" / "labels.csv").write_text("pair_id,label\n")
    cached = (out / "cache.sqlite").stat().st_size
    second = de.run(small(out, n=4, overwrite=True), conversations=demo_conversations())
    assert second.status == "completed"
    assert second.counts.sampled == 4
    assert second.counts.pairs > first.counts.pairs
    assert (out / "notes.md").read_text() == "my notes"
    assert (out / "verdicts" / "labels.csv").exists()
    assert (out / "cache.sqlite").stat().st_size >= cached  # the answers stay and are reused
    assert len(second.manifest.sessions) == 1


def test_differences_are_dotted_paths() -> None:
    assert differences({"a": {"b": 1, "c": 2}}, {"a": {"b": 1, "c": 3}, "d": 0}) == ["a.c", "d"]
    assert differences({"x": [1]}, {"x": [1]}) == []


def test_a_second_writer_is_refused_naming_the_holder(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with (
        RunFolder(out).lock(),
        pytest.raises(RunFolderError, match=r"being written by another run \(pid \d+, started 20"),
    ):
        de.run(small(out), conversations=demo_conversations())
    # released: the run goes ahead now
    assert de.run(small(out), conversations=demo_conversations()).status == "completed"


def test_a_run_waits_for_a_reader_pulling_the_folder_and_fails_at_once_for_a_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "run"
    reader = FolderLock(out).acquire(reading=True)  # what reading an object-store run holds while it pulls
    threading.Timer(0.5, reader.release).start()
    assert de.run(small(out), conversations=demo_conversations()).status == "completed"
    # a reader that does not end in time: said as what it is
    monkeypatch.setattr(folder_module, "READER_WAIT_S", 0.2)
    stuck = FolderLock(out).acquire(reading=True)
    try:
        with pytest.raises(RunFolderError, match="being brought up to date for reading by another process"):
            de.run(small(out), conversations=demo_conversations())
    finally:
        stuck.release()
    # the lock a writer left says nothing of reading: the next run is refused at once, not made to wait
    monkeypatch.setattr(folder_module, "READER_WAIT_S", 60.0)
    with RunFolder(out).lock(), pytest.raises(RunFolderError, match="being written by another run"):
        de.run(small(out), conversations=demo_conversations())


def test_the_lock_of_a_killed_process_is_released_by_the_os(tmp_path: Path) -> None:
    out = tmp_path / "run"
    holder = (
        "import sys, time; from pathlib import Path; from delta_eval.store.folder import RunFolder; "
        "held = RunFolder(Path(sys.argv[1])).lock().acquire(); print('held', flush=True); time.sleep(60)"
    )
    with subprocess.Popen([sys.executable, "-c", holder, str(out)], stdout=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "held"
            with pytest.raises(RunFolderError, match=f"pid {proc.pid}"), RunFolder(out).lock():
                pass
        finally:
            proc.kill()
    with RunFolder(out).lock():
        pass
