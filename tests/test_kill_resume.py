"""A run killed with SIGKILL mid-way resumes on the same folder: no duplicate, no missing pair, nothing re-asked."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

import delta_eval as de
from delta_eval.demo import demo_config, demo_conversations
from tests.killing import commits_at_least, kill_when

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")]


def cached_responses(run_dir: Path) -> int:
    con = sqlite3.connect(run_dir / "cache.sqlite")
    try:
        return int(con.execute("SELECT count(*) FROM responses").fetchone()[0])
    finally:
        con.close()


def test_sigkill_then_resume(tmp_path: Path) -> None:
    out = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "delta_eval",
        "demo",
        "--out",
        str(out),
        "-n",
        "30",
        "--latency-ms",
        "40",
        "--no-progress",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    kill_when(proc, commits_at_least(out))

    killed = de.open_result(out)
    assert killed.status == "running"  # the process never got to say otherwise
    kept = killed.table("verdicts").num_rows
    paid_before_kill = cached_responses(out)
    assert kept > 0
    assert paid_before_kill > 0

    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = de.open_result(out)
    assert result.status == "completed"
    con = result.connect()
    total, distinct = con.execute("SELECT count(*), count(DISTINCT pair_id) FROM verdicts").fetchone()
    replays, replay_keys = con.execute("SELECT count(*), count(DISTINCT (pair_id, side)) FROM replays").fetchone()
    assert total == distinct == result.counts.pairs_planned
    assert replays == replay_keys == 3 * total
    assert con.execute("SELECT count(DISTINCT conversation_id) FROM conversations").fetchone() == (30,)
    assert con.execute("SELECT count(*) FROM conversations").fetchone() == (30,)
    sessions = result.manifest.sessions
    assert [s.status for s in sessions] == ["killed", "completed"]
    # the killed session's calls are counted: those it recorded at its last batch, and the answers it got after
    # that, found in the cache (every answer is cached once)
    assert sessions[0].answered == paid_before_kill
    assert sessions[0].answered - sessions[0].answered_unrecorded > 0
    assert result.counts.calls.answered == sessions[0].answered + sessions[1].answered == cached_responses(out)
    # and every call it sent is counted, those in flight at the kill included (from its journal of calls sent)
    assert sessions[0].sent is not None
    assert sessions[1].sent is not None
    failed = sum(c.retries + c.failed for c in sessions[0].calls.values())
    assert sessions[0].lost_at_kill == max(0, sessions[0].sent - sessions[0].answered - failed)
    assert result.counts.calls.made == sessions[0].sent + sessions[1].sent
    assert result.counts.calls.lost == sessions[0].lost_at_kill
    assert sessions[-1].resumed_pairs == kept
    assert sessions[-1].cached_responses_at_start == paid_before_kill
    assert "session 1: killed" in done.stdout

    # The same run uninterrupted asks for exactly as many distinct answers; the resumed session asked only for
    # those the killed one had not already cached.
    fresh = de.run(demo_config(tmp_path / "fresh", n=30, latency_ms=0.0), conversations=demo_conversations())
    needed = cached_responses(fresh.path)
    resumed = result.manifest.sessions[-1]
    answered_after = resumed.answered
    assert cached_responses(out) == needed
    assert answered_after == needed - paid_before_kill
    assert resumed.cache.hits >= 1
    assert result.win_rate() == fresh.win_rate()
    # The LLM judges' calls are among them: one cached answer per judge call of the finished run, none paid twice.
    judge_calls = con.execute("SELECT count(*) FROM judgements WHERE answer <> 'error'").fetchone()[0]
    assert judge_calls > 0
    cache = sqlite3.connect(out / "cache.sqlite")
    try:
        cached = cache.execute("SELECT count(*) FROM responses WHERE model LIKE 'simulated:judge%'").fetchone()[0]
    finally:
        cache.close()
    assert cached == judge_calls


def start_demo(out: Path) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "delta_eval", "demo", "--out", str(out), "-n", "30", "--latency-ms", "40",
           "--no-progress"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(list((out / "_commits").glob("*.json"))) < 3:
        assert proc.poll() is None, "the run ended before it could be stopped"
        time.sleep(0.05)
    return proc


@pytest.mark.parametrize("signals", [("SIGTERM",), ("SIGHUP",), ("SIGINT", "SIGINT"), ("SIGTERM", "SIGINT")])
def test_stop_signals_save_finished_pairs_and_end_as_interrupted(tmp_path: Path, signals: tuple[str, ...]) -> None:
    out = tmp_path / "run"
    proc = start_demo(out)
    with proc:
        for name in signals:
            os.kill(proc.pid, getattr(signal, name))
            time.sleep(0.2)
        _, err = proc.communicate(timeout=60)
    # A second signal that comes once the run has saved and ended gets the default action (-2 for SIGINT).
    assert proc.returncode in (1, -signal.SIGINT), err
    assert "interrupted; finished pairs are saved" in err
    result = de.open_result(out)
    assert result.status == "interrupted"
    assert [s.status for s in result.manifest.sessions] == ["interrupted"]
    assert result.manifest.sessions[0].answered > 0
    kept = result.table("verdicts").num_rows
    assert kept > 0
    assert result.damage == []
