"""A run sharded over a real Ray cluster on 127.0.0.1: a head node and a worker node, each one CPU, started by
``ray start`` in process groups of their own and stopped by ending those groups (never ``ray stop``, which ends
every Ray process of the machine, the user's own included).

The sharded run gives the verdicts of a one-process run of the same configuration, and a shard's worker killed
mid-run (SIGKILL) loses nothing: Ray runs the shard again, which skips the pairs already committed and takes the
answers paid for from the response cache; no pair is written twice.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray")

import delta_eval as de
from delta_eval.demo import demo_config, demo_conversations

pytestmark = pytest.mark.slow

N, LATENCY_MS = 30, 30.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop_group(pgid: int) -> None:
    """End a process group this test started: SIGTERM, then SIGKILL what is left."""
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 0.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.2)


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[str]:
    """A head node and a worker node on 127.0.0.1 (one CPU each); yields the head's address."""
    ray = str(Path(sys.executable).with_name("ray"))
    temp = tempfile.mkdtemp(prefix="de-ray-", dir="/tmp")  # Ray's socket paths must stay short
    port = _free_port()
    # No token auth: a token file a user's own Ray left in ~/.ray would make the head demand it from the worker.
    token_path = os.path.join(temp, "no_auth_token")
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled", "RAY_AUTH_TOKEN_PATH": token_path}
    saved = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH")}
    os.environ.update(RAY_AUTH_MODE="disabled", RAY_AUTH_TOKEN_PATH=token_path)  # this process drives the run
    common = ["--node-ip-address", "127.0.0.1", "--num-cpus", "1", "--disable-usage-stats"]
    commands = [
        [ray, "start", "--head", "--port", str(port), "--include-dashboard=false", "--temp-dir", temp, *common],
        [ray, "start", "--address", f"127.0.0.1:{port}", *common],
    ]
    groups: list[int] = []
    try:
        for cmd in commands:
            # A session of its own: every process the node starts is in this group, ended at teardown.
            started = subprocess.Popen(
                cmd, start_new_session=True, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
            )
            groups.append(started.pid)
            out, _ = started.communicate(timeout=120)
            assert started.returncode == 0, out.decode(errors="replace")[-2000:]
        yield f"127.0.0.1:{port}"
    finally:
        import ray as ray_module

        ray_module.shutdown()
        for pgid in reversed(groups):
            _stop_group(pgid)
        shutil.rmtree(temp, ignore_errors=True)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _config(out: Path) -> de.RunConfig:
    return demo_config(out, n=N, latency_ms=LATENCY_MS).model_copy(update={"flush_every": 5, "concurrency": 8})


def _verdicts(out: Path) -> list[tuple[Any, ...]]:
    table = de.open_result(out)._folder.read("verdicts")
    rows = table.select(["pair_id", "outcome", "stage", "preference"]).to_pylist()
    return sorted(tuple(r.values()) for r in rows)


@pytest.fixture(scope="module")
def one_process(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[Any, ...]]:
    out = tmp_path_factory.mktemp("one") / "run"
    de.run(_config(out), conversations=demo_conversations(), progress=False)
    return _verdicts(out)


def test_a_run_on_a_ray_cluster_gives_the_verdicts_of_a_one_process_run(
    ray_cluster: str, one_process: list[tuple[Any, ...]], tmp_path: Path
) -> None:
    executor = de.RayExecutor(ray_cluster)
    result = de.run(_config(tmp_path / "ray"), conversations=demo_conversations(), progress=False, executor=executor)
    assert result.status == "completed"
    assert executor.shard_count() == 2  # the head's CPU and the worker's
    got = _verdicts(tmp_path / "ray")
    assert len(got) == len(one_process) > 0
    assert got == one_process
    manifest = result.manifest
    assert len(manifest.sessions) == 1
    assert sum(s.answered for s in manifest.sessions[-1].calls.values()) > 0  # the shards' calls are counted


def _shard_workers() -> list[int]:
    """Processes running a shard (Ray names a worker's process after its task)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "cmdline").read_bytes().startswith(b"ray::run_shard"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def test_a_worker_killed_mid_run_loses_nothing(
    ray_cluster: str, one_process: list[tuple[Any, ...]], tmp_path: Path
) -> None:
    out = tmp_path / "killed"
    done: dict[str, Any] = {}

    def run() -> None:
        try:
            done["result"] = de.run(
                _config(out), conversations=demo_conversations(), progress=False, executor=de.RayExecutor(ray_cluster)
            )
        except BaseException as exc:
            done["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    killed = None
    deadline = time.monotonic() + 120
    while killed is None and thread.is_alive() and time.monotonic() < deadline:
        # once some pairs are committed (batch 1 is the population's), kill a shard's worker
        committed = len(list((out / "_commits").glob("0*.json"))) if (out / "_commits").is_dir() else 0
        workers = _shard_workers()
        if committed >= 3 and workers:
            killed = workers[0]
            os.kill(killed, signal.SIGKILL)
        time.sleep(0.05)
    thread.join(timeout=300)
    assert "error" not in done, done.get("error")
    assert killed is not None, "the run ended before a worker could be killed"
    assert done["result"].status == "completed"
    got = _verdicts(out)
    assert len({row[0] for row in got}) == len(got)  # no pair twice
    assert got == one_process
