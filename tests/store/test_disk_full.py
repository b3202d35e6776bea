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
