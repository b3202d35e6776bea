"""Executors on this machine: the shards as tasks of this process's event loop, or one process per core.

:class:`ProcessExecutor` is what uses every core of one machine: one event loop per process (this one runs the
first shard), each with its share of every model's limits (:class:`~delta_eval.executors.base.SplitLimiters`),
the workers started with ``spawn`` (so the shard, its configuration and a tool simulator of yours must pickle)
while the session samples, and stopped with SIGTERM, which makes each shard commit its finished pairs first.
Spawned, not forked from a fork server: a fork server is one per program (a run could not stop it without stopping
the program's own pools, and its workers would get its environment of when it started, not the session's API keys
of now).
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing
import os
import sys
import threading
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection
from typing import Any

import anyio

from delta_eval.adapters.limits import Limiter, ModelLimiter, ModelLimits
from delta_eval.adapters.registry import adapter_modules
from delta_eval.config import RunConfig
from delta_eval.exceptions import DeltaEvalError
from delta_eval.executors.base import Executor, Shard, ShardReport, SplitLimiters
from delta_eval.executors.shard import arun_shard, run_shard
from delta_eval.failures import describe_failure
from delta_eval.installed import installed

__all__ = ["SHARD_MODULES", "InProcessExecutor", "ProcessExecutor", "ShardFailedError", "shard_modules"]


class ShardFailedError(DeltaEvalError):
    """A shard of a sharded run failed, or its worker died; rerunning the same command resumes the run."""


@dataclass
class _SharedLimiters:
    """One limiter per model for every shard of this process."""

    made: dict[str, Limiter] = field(default_factory=dict)

    def __call__(self, model: str, limits: ModelLimits) -> Limiter:
        if model not in self.made:
            assert limits.max_concurrency is not None
            self.made[model] = ModelLimiter(limits.max_concurrency, limits.requests_per_minute, limits.adaptive)
        return self.made[model]


@dataclass(frozen=True)
class InProcessExecutor(Executor):
    """The shards as concurrent tasks of this process's event loop, one limiter per model for all of them: the
    sharded code path without other processes (for tests, and to check a sharded run's result against a plain
    one)."""

    shards: int = 2

    def shard_count(self) -> int:
        """``shards``."""
        return max(1, self.shards)

    async def run(self, shards: list[Shard], limits: dict[str, ModelLimits]) -> list[ShardReport]:
        """Run every shard concurrently here."""
        shared = _SharedLimiters()
        reports: list[ShardReport] = []

        async def one(shard: Shard) -> None:
            reports.append(await arun_shard(replace(shard, limiters=shared)))

        async with anyio.create_task_group() as tg:
            for shard in shards:
                tg.start_soon(one, shard)
        return sorted(reports, key=lambda r: r.index)


def _child(conn: Connection, modules: list[str]) -> None:
    """A worker process: import what its shard will run on, wait for the shard, run it and send its report (or its
    error) back; then end at once (everything the shard wrote is closed and committed by then)."""
    try:
        for name in modules:
            with contextlib.suppress(Exception):  # a module that fails to import fails the shard itself, said there
                importlib.import_module(name)
        shard: Shard = conn.recv()
    except (EOFError, KeyboardInterrupt):  # the session ended (or was interrupted) before it had a shard for it
        return
    try:
        conn.send(("ok", run_shard(shard)))
    except BaseException as exc:
        conn.send(("interrupted" if isinstance(exc, KeyboardInterrupt) else "failed", describe_failure(exc)))
    finally:
        conn.close()
    # The interpreter's teardown (freeing every object of the shard) is work the session would wait for: ended at
    # once, once what may still be buffered (output, log handlers) is out.
    if "logging" in sys.modules:
        sys.modules["logging"].shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


#: What every worker imports before its shard arrives, whatever the run: the code a shard runs.
SHARD_MODULES = ("delta_eval.executors.shard",)


def shard_modules(config: RunConfig | None) -> list[str]:
    """What a worker imports before its shard arrives, declared rather than read from what this process happened
    to import: :data:`SHARD_MODULES`, the event loop a shard runs on (uvloop where installed, as
    :func:`~delta_eval.sync.run_loop`), and for each model of ``config`` (``None``: no model known yet) the modules
    the registry names for it (its adapter, its SDK's HTTP transport) and the modules of the user's own judges:
    the shard builds the same models and judges.

    Example:
        >>> from delta_eval.demo import demo_config
        >>> [m for m in shard_modules(demo_config("run")) if m != "uvloop"]
        ['delta_eval.executors.shard', 'delta_eval.adapters.simulated']
    """
    loop = ["uvloop"] if installed("uvloop") else []
    models = config.model_ids() if config is not None else []
    adapters = [name for model in models for name in adapter_modules(model)]
    judges = config.judges.modules() if config is not None else []
    return list(dict.fromkeys([*SHARD_MODULES, *loop, *adapters, *judges]))


@dataclass(frozen=True)
class ProcessExecutor(Executor):
    """``workers`` shards on this machine (default: one per core), each on an event loop of its own: this process
    runs the first, on the session's loop (it would otherwise only wait), and a worker process each of the others.

    The processes start while the session samples (:meth:`prepare`) and import what a shard runs on meanwhile
    (about 2 s of CPU each, the SDKs and the library: what running one shard here saves); each gets its shard when
    the sample is cut. One session at a time per executor.

    Example::

        de.run(config, executor=de.ProcessExecutor())   # every core of this machine
    """

    workers: int | None = None
    #: The processes started by :meth:`prepare` and not yet given a shard, each with its end of a duplex pipe.
    _ready: list[tuple[Any, Connection]] = field(default_factory=list, init=False, repr=False, compare=False)
    #: The thread :meth:`prepare` starts them on.
    _starting: list[threading.Thread] = field(default_factory=list, init=False, repr=False, compare=False)

    def shard_count(self) -> int:
        """``workers``, or the number of cores."""
        return max(1, self.workers or os.cpu_count() or 1)

    def prepare(self, config: RunConfig | None = None) -> None:
        """Start a worker process per shard but the first (which runs here) now, on a thread of its own (starting
        a process blocks until it runs), so that their start-up (each imports what a shard of ``config`` runs on,
        :func:`shard_modules`) overlaps the session's sampling."""
        self.release()
        modules = shard_modules(config)

        def start() -> None:
            self._ready.extend(self._start(self.shard_count() - 1, modules))  # (the first shard runs here)

        thread = threading.Thread(target=start, name="delta-eval-workers", daemon=True)
        thread.start()
        self._starting.append(thread)

    def _started(self) -> None:
        """Wait until the workers :meth:`prepare` is starting have started (or failed to: :meth:`run` then starts
        its own and says why they do not start)."""
        for thread in self._starting:
            thread.join()
        self._starting.clear()

    def release(self) -> None:
        """End the workers :meth:`prepare` started that got no shard (their pipe closed, each ends by itself)."""
        self._started()
        idle, self._ready[:] = list(self._ready), []
        for _, conn in idle:
            conn.close()
        for process, _ in idle:
            process.join(5)
            if process.is_alive():
                process.terminate()

    @staticmethod
    def _start(n: int, modules: list[str]) -> list[tuple[Any, Connection]]:
        ctx = multiprocessing.get_context("spawn")  # never forked: this process runs threads and an event loop
        started = []
        for _ in range(n):
            # Only the pipe and module names go to the process at its start (a shard is sent once it waits for
            # it): start() does not block on a child that reads a large shard while it still imports.
            mine, theirs = ctx.Pipe(duplex=True)
            process = ctx.Process(target=_child, args=(theirs, modules), daemon=True)
            process.start()
            theirs.close()
            started.append((process, mine))
        return started

    async def run(self, shards: list[Shard], limits: dict[str, ModelLimits]) -> list[ShardReport]:
        """Run the first shard here and give each other one to a worker (started now where :meth:`prepare` did
        not); wait for every report. On cancellation, stop the workers (each commits first; so does the shard
        here)."""
        split = SplitLimiters(len(shards))
        here, elsewhere = shards[:1], shards[1:]
        cause: Exception | None = None  # what failed the shard here
        started: list[tuple[Any, Connection]] = []
        try:
            await anyio.to_thread.run_sync(self._started)
            taken = min(len(elsewhere), len(self._ready))
            started, self._ready[:taken] = self._ready[:taken], []
            modules = shard_modules(shards[0].config if shards else None)
            more = await anyio.to_thread.run_sync(self._start, len(elsewhere) - len(started), modules)
            started += more
            results: dict[int, tuple[str, Any]] = {}
            # The pipes' blocking calls on threads of their own: on anyio's default threads (40 for the process),
            # a machine of many cores would have the shard here wait behind them for its commits.
            pipes = anyio.CapacityLimiter(max(1, 2 * len(elsewhere)))

            async def local(shard: Shard) -> None:
                # As a worker reports it: a shard that fails here fails the run as one that fails there.
                nonlocal cause
                try:
                    results[0] = ("ok", await arun_shard(replace(shard, limiters=split)))
                except Exception as exc:
                    results[0], cause = ("failed", describe_failure(exc)), exc

            async def give(k: int, shard: Shard, conn: Connection) -> None:
                # Each on its own thread: a send blocks until the worker has read the shard. A worker that died
                # before it did is reported by wait().
                with contextlib.suppress(OSError):
                    await anyio.to_thread.run_sync(conn.send, replace(shard, limiters=split), abandon_on_cancel=True,
                                                   limiter=pipes)  # fmt: skip

            async def wait(k: int, process: Any, conn: Connection) -> None:
                # Polled, not a blocking recv: a process that dies before it took its end of the pipe leaves no
                # end of file to see.
                while not await anyio.to_thread.run_sync(conn.poll, 0.5, abandon_on_cancel=True, limiter=pipes):
                    if not process.is_alive() and not conn.poll():
                        results[k] = ("failed", f"its worker process died (exit code {process.exitcode})")
                        return
                try:
                    results[k] = conn.recv()
                except EOFError:
                    results[k] = ("failed", f"its worker process died (exit code {process.exitcode})")

            async with anyio.create_task_group() as tg:
                for shard in here:
                    tg.start_soon(local, shard)
                for k, ((process, conn), shard) in enumerate(zip(started, elsewhere, strict=True), start=1):
                    tg.start_soon(give, k, shard, conn)
                    tg.start_soon(wait, k, process, conn)
        except BaseException:
            for process, _ in started:
                if process.is_alive():
                    process.terminate()  # SIGTERM: the shard commits its finished pairs and ends
            with anyio.CancelScope(shield=True):
                for process, _ in started:
                    await anyio.to_thread.run_sync(process.join, 30)
            raise
        finally:
            for _, conn in started:
                conn.close()
        for process, _ in started:
            process.join()
        failed = [f"shard {k}: {text}" for k, (status, text) in sorted(results.items()) if status != "ok"]
        if failed:
            raise ShardFailedError("; ".join(failed)[:1000] + " (rerun the same command to resume)") from cause
        return [results[k][1] for k in range(len(shards))]
