"""A full disk: the run says so (the first ENOSPC, not a later failure), its manifest ends ``failed`` with the
reason, the report shows it, and a rerun once there is space resumes."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import delta_eval as de
from delta_eval.analysis.report import render_report
from delta_eval.cli import main
from delta_eval.demo import demo_config, demo_conversations


def fill_the_disk_after(monkeypatch: pytest.MonkeyPatch, writes: int) -> dict[str, int]:
    """Parquet writes succeed ``writes`` times, then fail as a full disk does; the manifest's (small) write too,
    once, as a disk still full would."""
    state = {"writes": 0, "manifest_failures": 0}
    real_write = pq.write_table

    def write_table(table: Any, where: Any, **kw: Any) -> None:
        state["writes"] += 1
        if state["writes"] > writes:
            raise OSError(errno.ENOSPC, "No space left on device", str(where))
        real_write(table, where, **kw)

    import delta_eval.store.folder as folder_module

    real_json = folder_module.write_json_atomic

    def write_json(path: Path, data: Any, **kw: Any) -> None:
        if state["writes"] > writes and path.name == "manifest.json" and not state["manifest_failures"]:
            state["manifest_failures"] += 1
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        real_json(path, data, **kw)

    monkeypatch.setattr(pq, "write_table", write_table)
    monkeypatch.setattr(folder_module, "write_json_atomic", write_json)
    return state


def config(out: Path) -> de.RunConfig:
    return demo_config(out, n=8, latency_ms=0.0).model_copy(update={"flush_every": 4})


def test_a_full_disk_fails_the_run_saying_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "run"
    state = fill_the_disk_after(monkeypatch, writes=8)
    with pytest.raises(BaseException, match=r"No space left on device|unhandled errors") as info:
        de.run(config(out), conversations=demo_conversations())
    assert "No space left on device" in repr(info.value)
    assert state["manifest_failures"] == 1
    result = de.open_result(out)
    assert result.status == "failed"
    assert result.manifest.failure is not None
    assert result.manifest.failure.startswith("the disk is full (writing ")
    assert "FAILED: the disk is full" in render_report(result)
    assert result.damage == []
    assert not list(out.rglob("*.tmp"))

    monkeypatch.undo()  # space again: the rerun resumes
    again = de.run(config(out), conversations=demo_conversations())
    assert again.status == "completed"
    assert again.manifest.failure is None
    assert [s.status for s in again.manifest.sessions] == ["failed", "completed"]


def test_the_cli_says_the_disk_is_full_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fill_the_disk_after(monkeypatch, writes=3)
    assert main(["demo", "--out", str(tmp_path / "run"), "-n", "4", "--latency-ms", "0", "--no-progress"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("delta-eval: error: the disk is full (writing ")
    assert not any("Traceback" in line for line in err)


def fill_the_disk(monkeypatch: pytest.MonkeyPatch, writes: int, *, until_reserve_freed: bool) -> None:
    """Parquet writes succeed ``writes`` times, then every write fails as on a full disk: the manifest's too, until
    the session frees its reserve (``until_reserve_freed``) or for good."""
    import delta_eval.store.folder as folder_module

    state = {"writes": 0}
    real_write, real_json = pq.write_table, folder_module.write_json_atomic

    def full(path: Any) -> bool:
        return state["writes"] > writes and not (until_reserve_freed and not (Path(path).parent / ".reserve").exists())

    def write_table(table: Any, where: Any, **kw: Any) -> None:
        state["writes"] += 1
        if full(where):
            raise OSError(errno.ENOSPC, "No space left on device", str(where))
        real_write(table, where, **kw)

    def write_json(path: Path, data: Any, **kw: Any) -> None:
        if full(path):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        real_json(path, data, **kw)

    monkeypatch.setattr(pq, "write_table", write_table)
    monkeypatch.setattr(folder_module, "write_json_atomic", write_json)


def test_the_reserve_makes_room_for_the_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "run"
    fill_the_disk(monkeypatch, writes=8, until_reserve_freed=True)
    with pytest.raises(BaseException, match=r"No space left on device|unhandled errors"):
        de.run(config(out), conversations=demo_conversations())
    result = de.open_result(out)
    assert result.status == "failed"
    assert result.manifest.failure is not None
    assert result.manifest.failure.startswith("the disk is full")
    assert not (out / ".reserve").exists()  # spent on the manifest
    monkeypatch.undo()
    again = de.run(config(out), conversations=demo_conversations())
    assert again.status == "completed"
    assert (out / ".reserve").stat().st_size == 1 << 20  # set aside again


def test_a_disk_that_stays_full_has_the_failure_recorded_by_the_next_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "run"
    fill_the_disk(monkeypatch, writes=8, until_reserve_freed=False)
    with pytest.raises(BaseException, match=r"No space left on device|unhandled errors"):
        de.run(config(out), conversations=demo_conversations())
    assert de.open_result(out).status == "running"  # the manifest could not be written: as a killed run's
    monkeypatch.undo()  # space again
    again = de.run(config(out), conversations=demo_conversations())
    assert again.status == "completed"
    assert [s.status for s in again.manifest.sessions] == ["failed", "completed"]
    assert again.manifest.sessions[0].ended_at is not None
    note = next(n for n in again.manifest.notes if n.startswith("session 1 ended failed"))
    assert "(the disk is full (writing " in note
    assert "this session recorded it" in note
    third = de.run(config(out), conversations=demo_conversations())  # said once, not again
    assert sum(n.startswith("session 1 ended failed") for n in third.manifest.notes) <= 1
