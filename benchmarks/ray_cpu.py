"""Where the CPU of a Ray run goes: the run of ``benchmarks/ray_scaling.py`` once on a local Ray cluster of two
worker processes, with the CPU seconds of every process (the shards, the limiter actor, the driver, Ray's raylet and
GCS, the fake server) and the messages the shards sent the limiter actor.

On two cores shared with the fake server, a Ray run is as fast as one process only where its CPU is: what Ray adds
(the actor, the shards' start-up, the messages) is what it lags by. CPU seconds and message counts say so on a
shared, noisy machine, where wall time does not. Linux only (it reads ``/proc``).

    python benchmarks/ray_cpu.py                 # 2,000 pairs, 200 ms, concurrency 512
    python benchmarks/ray_cpu.py --pairs 500
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import anyio

import delta_eval as de
from delta_eval.executors import ray_cluster

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ray_scaling import measure, run_arguments  # the run of the other benchmark

_TICKS = os.sysconf("SC_CLK_TCK")


class CountingHost(ray_cluster.LimiterHost):
    """The run's limiter actor, counting the messages it takes; it writes them to :attr:`counts` when a holder
    closes (the executor kills the actor when the run ends). Sent to the actor's process whole, with the path."""

    counts = ""

    def __init__(self, limits: dict[str, de.ModelLimits]) -> None:
        super().__init__(limits)
        self.sent: Counter[str] = Counter()

    async def acquire_many(self, model: str, *rest: Any) -> list[tuple[int, float]]:
        self.sent["acquire_many"] += 1
        got = await super().acquire_many(model, *rest)
        self.sent["slots granted"] += len(got)
        return got

    async def settle(self, model: str, *rest: Any) -> None:
        self.sent["settle"] += 1
        await super().settle(model, *rest)

    async def close(self, model: str, holder: str) -> None:
        await super().close(model, holder)
        await anyio.Path(self.counts).write_text(json.dumps(self.sent))


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime


def _name(pid: int) -> str:
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    title = argv[0].decode(errors="replace")
    if title.startswith("ray::CountingHost"):
        return "limiter actor"
    if title.startswith("ray::run_shard"):
        return "shards"
    if title.startswith("ray::"):
        return title
    if title.endswith("gcs_server"):
        return "Ray GCS"
    if title.endswith("raylet"):
        return "Ray raylet"
    if any(b"spawn_main" in arg for arg in argv):
        return "fake server"
    return "other (" + " ".join(a.decode(errors="replace") for a in argv[:2])[-60:] + ")"


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                children = [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
            out.extend(children)
            todo.extend(children)
    return out


def _watch(stop: threading.Event, seen: dict[int, tuple[str, float, float]]) -> None:
    """Every process under this one: its name (a Ray worker's, once it runs a shard or the actor) and CPU seconds,
    first and last seen (a process may end before the run does)."""
    while not stop.is_set():
        for pid in _descendants(os.getpid()):
            try:
                cpu, name = _cpu(pid), _name(pid)
            except OSError:
                continue
            old_name, first, _ = seen.get(pid, (name, cpu, cpu))
            if old_name in ("limiter actor", "shards"):
                name = old_name  # what the worker did, also once it is back in the pool
            seen[pid] = (name, first, cpu)
        stop.wait(0.25)


def main(argv: list[str] | None = None) -> None:
    args = run_arguments(__doc__).parse_args(argv)

    import ray

    ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    seen: dict[int, tuple[str, float, float]] = {}
    stop = threading.Event()
    watcher = threading.Thread(target=_watch, args=(stop, seen), daemon=True)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            counts = str(Path(tmp) / "counts.json")
            CountingHost.counts = counts
            host = ray_cluster.LimiterHost
            ray_cluster.LimiterHost = CountingHost  # type: ignore[misc]  # the executor's actor, for this run
            try:
                watcher.start()
                time.sleep(0.5)  # the processes already there, and their CPU so far
                driver = _cpu(os.getpid())
                got = measure(
                    args.pairs,
                    args.latency_ms,
                    args.concurrency,
                    Path(tmp) / "run",
                    de.RayExecutor(shards=args.workers),
                )
                driver = _cpu(os.getpid()) - driver
            finally:
                ray_cluster.LimiterHost = host  # type: ignore[misc]
            time.sleep(0.5)
            stop.set()
            watcher.join()
            sent = Counter(json.loads(Path(counts).read_text())) if Path(counts).exists() else Counter()
    finally:
        ray.shutdown()
    by: dict[str, float] = {}
    for name, first, last in seen.values():
        by[name] = by.get(name, 0.0) + last - first
    by["driver (this process)"] = driver
    calls = got["calls"]
    print(
        f"ray cpu: {got['pairs']:,} pairs, {calls:,} calls, {got['seconds']:.1f} s wall"
        f" ({got['seconds'] / got['ideal']:.2f}x the ideal), fake OpenAI server at {args.latency_ms:.0f} ms"
    )
    for name, cpu in sorted(by.items(), key=lambda item: -item[1]):
        if cpu >= 0.05:
            print(f"  {name:<40}{cpu:7.2f} s CPU {cpu / calls * 1000:6.2f} ms a call")
    total = sum(by.values())
    print(f"  {'all':<40}{total:7.2f} s CPU {total / calls * 1000:6.2f} ms a call")
    messages = sent["acquire_many"] + sent["settle"]
    print(
        f"limiter actor messages: {messages:,} ({messages / calls:.2f} a call): {sent['acquire_many']:,} asks for"
        f" {sent['slots granted']:,} slots, {sent['settle']:,} settles"
    )


if __name__ == "__main__":
    main()
