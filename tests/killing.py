"""Killing a run's process at a chosen moment, for the tests that resume what it left."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["commits_at_least", "kill_when"]


def kill_when(proc: subprocess.Popen[Any], ready: Callable[[], bool], *, timeout: float = 120.0) -> None:
    """SIGKILL ``proc`` as soon as ``ready()`` holds; fails if the process ends first or ``ready`` never holds
    within ``timeout`` seconds. The process is waited for whatever happens."""
    try:
        deadline = time.monotonic() + timeout
        while not ready():
            assert proc.poll() is None, "the run ended before it could be killed"
            assert time.monotonic() < deadline, "the moment to kill the run never came"
            time.sleep(0.02)
        proc.kill()
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL


def commits_at_least(out: Path, count: int = 3) -> Callable[[], bool]:
    """Whether run folder ``out`` holds ``count`` committed batches (by default the population batch and two batches
    of pairs)."""
    return lambda: len(list((out / "_commits").glob("*.json"))) >= count
