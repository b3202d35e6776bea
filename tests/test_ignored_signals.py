"""Runs started from a non-interactive shell: SIGTERM still stops them (and the process exits), and a signal the
shell ignored for them (SIGINT of a ``cmd &`` job, SIGHUP under ``nohup``) stays ignored."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import delta_eval as de

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="needs POSIX signals")]

# Generous: a run that saved its pairs exits within seconds; one that hangs never does, and fails the test.
EXIT_TIMEOUT = 90


def demo_cmd(out: Path) -> list[str]:
    return [sys.executable, "-m", "delta_eval", "demo", "--out", str(out), "-n", "30", "--latency-ms", "40",
            "--no-progress"]  # fmt: skip


def in_background(cmd: list[str], err: Path, *, wrapper: str = "") -> tuple[subprocess.Popen[str], int]:
    """Start ``cmd`` as a non-interactive bash script does with ``cmd &`` (bash then ignores SIGINT and SIGQUIT in
    the job), its stderr to ``err``; return the shell and the job's pid."""
    script = f"{wrapper}{shlex.join(cmd)} >/dev/null 2>{shlex.quote(str(err))} & echo $!; wait $!"
    shell = subprocess.Popen(["bash", "-c", script], stdout=subprocess.PIPE, text=True)
    assert shell.stdout is not None
    return shell, int(shell.stdout.readline())


def wait_for_commits(out: Path, shell: subprocess.Popen[str]) -> None:
    """Wait until the population batch and at least two batches of pairs are committed."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(list((out / "_commits").glob("*.json"))) < 3:
        assert shell.poll() is None, "the run ended before it could be signalled"
        time.sleep(0.05)


def finish(shell: subprocess.Popen[str], pid: int) -> None:
    """Wait for the job to exit; one still running after EXIT_TIMEOUT fails the test (and is killed)."""
    try:
        shell.communicate(timeout=EXIT_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.kill(pid, signal.SIGKILL)
        shell.communicate()
        pytest.fail(f"the run did not exit within {EXIT_TIMEOUT}s of the signal")


@pytest.mark.parametrize("attempt", range(4))
def test_sigterm_stops_a_background_job_whose_sigint_is_ignored(tmp_path: Path, attempt: int) -> None:
    out = tmp_path / "run"
    err = tmp_path / "stderr.txt"
    shell, pid = in_background(demo_cmd(out), err)
    wait_for_commits(out, shell)
    os.kill(pid, signal.SIGTERM)
    finish(shell, pid)
    assert shell.returncode == 1, err.read_text()  # `wait $!` hands on the job's own exit status
    assert "interrupted; finished pairs are saved" in err.read_text()
    result = de.open_result(out)
    assert result.status == "interrupted"
    assert result.table("verdicts").num_rows > 0
    assert result.damage == []


@pytest.mark.parametrize("attempt", range(3))
def test_sighup_leaves_a_nohup_run_going(tmp_path: Path, attempt: int) -> None:
    out = tmp_path / "run"
    err = tmp_path / "stderr.txt"
    shell, pid = in_background(demo_cmd(out), err, wrapper="nohup ")
    wait_for_commits(out, shell)
    os.kill(pid, signal.SIGHUP)
    os.kill(pid, signal.SIGINT)  # ignored too: the job was started with `&` by a non-interactive shell
    finish(shell, pid)
    assert shell.returncode == 0, err.read_text()
    result = de.open_result(out)
    assert result.status == "completed"
    assert [s.status for s in result.manifest.sessions] == ["completed"]
