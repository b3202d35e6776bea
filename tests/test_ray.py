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
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray")

import delta_eval as de
from delta_eval.demo import demo_config, demo_conversations
from delta_eval.store.shard_copy import shard_copies
from delta_eval.uris import WORK_DIR_ENV
from tests.object_store import CREDENTIALS, S3, s3_server

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


@dataclass(frozen=True)
class Cluster:
    """The head's address, and where each node (head, worker) keeps working copies of object-store run folders:
    a folder of its own, as on machines apart."""

    address: str
    work_dirs: tuple[Path, Path]


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[Cluster]:
    """A head node and a worker node on 127.0.0.1 (one CPU each), each with a work dir of its own and the
    credentials of the tests' S3 server."""
    ray = str(Path(sys.executable).with_name("ray"))
    temp = tempfile.mkdtemp(prefix="de-ray-", dir="/tmp")  # Ray's socket paths must stay short
    port = _free_port()
    # No token auth: a token file a user's own Ray left in ~/.ray would make the head demand it from the worker.
    token_path = os.path.join(temp, "no_auth_token")
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled", "RAY_AUTH_TOKEN_PATH": token_path,
           **CREDENTIALS}  # fmt: skip
    work_dirs = (Path(temp) / "head-work", Path(temp) / "worker-work")
    saved = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH")}
    os.environ.update(RAY_AUTH_MODE="disabled", RAY_AUTH_TOKEN_PATH=token_path)  # this process drives the run
    common = ["--node-ip-address", "127.0.0.1", "--num-cpus", "1", "--disable-usage-stats"]
    commands = [
        [ray, "start", "--head", "--port", str(port), "--include-dashboard=false", "--temp-dir", temp, *common],
        [ray, "start", "--address", f"127.0.0.1:{port}", *common],
    ]
    groups: list[int] = []
    try:
        for cmd, work in zip(commands, work_dirs, strict=True):
            # A session of its own: every process the node starts is in this group, ended at teardown.
            started = subprocess.Popen(
                cmd, start_new_session=True, env={**env, WORK_DIR_ENV: str(work)}, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )  # fmt: skip
            groups.append(started.pid)
            out, _ = started.communicate(timeout=120)
            assert started.returncode == 0, out.decode(errors="replace")[-2000:]
        yield Cluster(f"127.0.0.1:{port}", work_dirs)
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
    ray_cluster: Cluster, one_process: list[tuple[Any, ...]], tmp_path: Path
) -> None:
    executor = de.RayExecutor(ray_cluster.address)
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


def _killing_a_shard(
    run: Callable[[], de.RunResult], committed: Callable[[], int], on_kill: Callable[[], None] = lambda: None
) -> de.RunResult:
    """``run()`` in a thread, a shard's worker killed (SIGKILL) once ``committed()`` batches are (batch 1 is the
    population's, so some pairs are), then ``on_kill()``; the run's result."""
    done: dict[str, Any] = {}

    def target() -> None:
        try:
            done["result"] = run()
        except BaseException as exc:
            done["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    killed = None
    deadline = time.monotonic() + 120
    while killed is None and thread.is_alive() and time.monotonic() < deadline:
        workers = _shard_workers()
        if workers and committed() >= 3:
            killed = workers[0]
            os.kill(killed, signal.SIGKILL)
            on_kill()
        time.sleep(0.05)
    thread.join(timeout=300)
    assert "error" not in done, done.get("error")
    assert killed is not None, "the run ended before a worker could be killed"
    result: de.RunResult = done["result"]
    assert result.status == "completed"
    return result


def test_a_worker_killed_mid_run_loses_nothing(
    ray_cluster: Cluster, one_process: list[tuple[Any, ...]], tmp_path: Path
) -> None:
    out = tmp_path / "killed"
    _killing_a_shard(
        lambda: de.run(
            _config(out), conversations=demo_conversations(), progress=False,
            executor=de.RayExecutor(ray_cluster.address),
        ),
        lambda: len(list((out / "_commits").glob("0*.json"))) if (out / "_commits").is_dir() else 0,
    )  # fmt: skip
    got = _verdicts(out)
    assert len({row[0] for row in got}) == len(got)  # no pair twice
    assert got == one_process


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[S3]:
    """A fresh S3 server for the test; this process's working copies under ``tmp_path/driver``, apart from the
    nodes' (see :class:`Cluster`)."""
    monkeypatch.setenv(WORK_DIR_ENV, str(tmp_path / "driver"))
    with s3_server(monkeypatch) as server:
        yield server


def test_a_ray_run_into_an_object_store_gives_the_verdicts_of_a_one_process_run_into_it(
    ray_cluster: Cluster, one_process: list[tuple[Any, ...]], s3: S3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each shard works in a working copy of its own in its node's work dir (never the session's, never the
    other's): the batches meet on the remote only."""
    de.run(_config(s3.uri("one")), conversations=demo_conversations(), progress=False)
    uri = s3.uri("ray")
    result = de.run(
        _config(uri), conversations=demo_conversations(), progress=False, executor=de.RayExecutor(ray_cluster.address)
    )
    assert result.status == "completed"
    assert len(result.manifest.sessions) == 1
    assert sum(s.answered for s in result.manifest.sessions[-1].calls.values()) > 0
    copies = shard_copies(uri).name
    for work in ray_cluster.work_dirs:  # a shard on each node, its copy there, removed at its end
        assert (work / copies).is_dir()
        assert not any(p.is_dir() for p in (work / copies).iterdir())
    assert not (tmp_path / "driver" / copies).exists()
    assert _verdicts(uri) == _verdicts(s3.uri("one")) == one_process
    monkeypatch.setenv(WORK_DIR_ENV, str(tmp_path / "reader"))  # read back on a fresh working copy
    again = de.open_result(uri)
    assert again.damage == []
    assert again.counts.pairs == len(one_process)
    assert _verdicts(uri) == one_process


def test_a_shard_killed_mid_run_into_an_object_store_loses_nothing_and_asks_nothing_uploaded_again(
    ray_cluster: Cluster, one_process: list[tuple[Any, ...]], s3: S3
) -> None:
    uri = s3.uri("killed")
    uploaded: list[str] = []
    _killing_a_shard(
        lambda: de.run(
            _config(uri), conversations=demo_conversations(), progress=False,
            executor=de.RayExecutor(ray_cluster.address),
        ),
        lambda: sum(rel.startswith("_commits/") for rel in s3.files("killed")),
        lambda: uploaded.extend(s3.cache_keys("killed")),
    )  # fmt: skip
    got = _verdicts(uri)
    assert len({row[0] for row in got}) == len(got)  # no pair twice
    assert got == one_process
    assert de.open_result(uri).damage == []
    # an answer uploaded when the worker was killed was never asked again: it is in one uploaded row only
    assert uploaded
    every = Counter(s3.cache_keys("killed"))
    assert {key: every[key] for key in uploaded if every[key] != 1} == {}
