"""Executors on this machine: the shards as tasks of this process's event loop, or one process per core.

:class:`ProcessExecutor` is what uses every core of one machine: one event loop per process, each with its share
of every model's limits (:class:`~delta_eval.executors.base.SplitLimiters`), started from multiprocessing's fork
server (``spawn`` where there is none; either way the shard, its configuration and a tool simulator of yours must
pickle) and stopped with SIGTERM, which makes each shard commit its finished pairs before it ends. A fork server
the run started is stopped (killed) when the run ends; one the program ran already is left running.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.machinery
import multiprocessing
import os
import signal
import sys
import threading
import traceback
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection
from multiprocessing.context import ForkServerContext, SpawnContext
from typing import Any

import anyio

from delta_eval.adapters.limits import Limiter, ModelLimiter, ModelLimits
from delta_eval.exceptions import DeltaEvalError
from delta_eval.executors.base import Executor, Shard, ShardReport, SplitLimiters
from delta_eval.executors.shard import arun_shard, run_shard

__all__ = ["InProcessExecutor", "ProcessExecutor", "ShardFailedError"]


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
    for name in modules:
        with contextlib.suppress(Exception):  # a module that fails to import fails the shard itself, said there
            importlib.import_module(name)
    try:
        shard: Shard = conn.recv()
    except EOFError:  # the session ended before it had a shard for this worker
        return
    try:
        conn.send(("ok", run_shard(shard)))
    except BaseException as exc:
        text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        conn.send(("interrupted" if isinstance(exc, KeyboardInterrupt) else "failed", text[:2000]))
    finally:
        conn.close()
    # The interpreter's teardown (freeing every object of the shard) is work the session would wait for.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _warm_modules() -> list[str]:
    """What a worker imports before its shard arrives: the shard's code, and the adapters (with their SDKs and
    transports) this process's models were built on: the shard builds the same models."""
    adapters = sorted(name for name in sys.modules if name.startswith("delta_eval.adapters."))
    transports = [name for name in ("uvloop", "aiohttp") if name in sys.modules]
    return ["delta_eval.executors.shard", *transports, *adapters]


def _context(modules: list[str]) -> ForkServerContext | SpawnContext:
    """Where workers come from: forked from multiprocessing's fork server where the platform has one (a process
    started once, that imports ``modules`` once: each worker then starts with them imported, instead of importing
    them on its own, ~1.2 s of CPU each), else spawned. Never forked from this process: it runs threads and an
    event loop."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    from multiprocessing import forkserver

    ctx = multiprocessing.get_context("forkserver")
    if forkserver._forkserver._forkserver_pid is None:  # type: ignore[attr-defined]
        # Not running: the first worker starts it, for this run (see _stop_fork_server). One the program runs
        # already (its own pools', the default start method from Python 3.14) is the program's, left alone.
        _OURS.add("fork server")
    if _fork_server_imports_this_package():
        # Read by the fork server when it starts (the first worker of this process), ignored after.
        ctx.set_forkserver_preload(modules)
    return ctx


def _fork_server_imports_this_package() -> bool:
    """Whether the fork server would import this very package: on Python 3.11 it imports what it preloads from its
    own path (the working directory first, then PYTHONPATH and site-packages), not from this process's. Where that
    finds another copy, nothing is preloaded: each worker then imports this process's copy on its own, after
    taking its path (as a spawned one does)."""
    here = sys.modules["delta_eval"].__spec__
    there = importlib.machinery.PathFinder.find_spec("delta_eval", [os.getcwd(), *sys.path[1:]])
    return here is not None and there is not None and here.origin == there.origin


#: Holds "fork server" while multiprocessing's fork server is one this module started (for a run's workers).
_OURS: set[str] = set()


def _stop_fork_server() -> None:
    """Stop multiprocessing's fork server where this module started it: it would outlive the run (a process of its
    own with the run's modules imported), and once this process has waited for it, every worker's CPU time counts
    among this process's children's, as a spawned worker's does. A fork server the program ran before the run
    started its workers is the program's: it keeps running."""
    if "fork server" not in _OURS:
        return
    _OURS.discard("fork server")
    from multiprocessing import forkserver

    server: Any = forkserver._forkserver
    if server._forkserver_pid is not None:
        # Killed, not asked to end: its workers have ended (each reaped by it) and it holds nothing to save, while
        # its interpreter's teardown (every module of the run) took ~0.3 s the session waited for.
        with contextlib.suppress(ProcessLookupError):
            os.kill(server._forkserver_pid, signal.SIGKILL)
    server._stop()  # closes its end of the pipe that keeps it alive, and waits for it (the module's own tests use it)


@dataclass(frozen=True)
class ProcessExecutor(Executor):
    """One process per shard on this machine, ``workers`` of them (default: one per core).

    The processes start while the session samples (:meth:`prepare`) and import what a shard runs on meanwhile;
    each gets its shard when the sample is cut. One session at a time per executor.

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

    def prepare(self) -> None:
        """Start a worker process per shard now, on a thread of its own (a worker from the fork server waits for
        the server to be up), so that their start-up overlaps the session's sampling."""
        self.release()
        modules = _warm_modules()  # here: what this process's models imported

        def start() -> None:
            self._ready.extend(self._start(self.shard_count(), modules))

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
        """End the workers :meth:`prepare` started that got no shard (their pipe closed, each ends by itself), and
        the fork server."""
        self._started()
        idle, self._ready[:] = list(self._ready), []
        for _, conn in idle:
            conn.close()
        for process, _ in idle:
            process.join(5)
            if process.is_alive():
                process.terminate()
        _stop_fork_server()

    @staticmethod
    def _start(n: int, modules: list[str]) -> list[tuple[Any, Connection]]:
        ctx = _context(modules)
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
        """Give each shard to a worker (started now where :meth:`prepare` did not) and wait for every report; on
        cancellation, stop them (each commits first)."""
        split = SplitLimiters(len(shards))
        started: list[tuple[Any, Connection]] = []
        try:
            await anyio.to_thread.run_sync(self._started)
            taken = min(len(shards), len(self._ready))
            started, self._ready[:taken] = self._ready[:taken], []
            more = await anyio.to_thread.run_sync(self._start, len(shards) - len(started), _warm_modules())
            started += more
            results: dict[int, tuple[str, Any]] = {}

            async def give(k: int, shard: Shard, conn: Connection) -> None:
                # Each on its own thread: a send blocks until the worker has read the shard. A worker that died
                # before it did is reported by wait().
                with contextlib.suppress(OSError):
                    await anyio.to_thread.run_sync(conn.send, replace(shard, limiters=split), abandon_on_cancel=True)

            async def wait(k: int, process: Any, conn: Connection) -> None:
                # Polled, not a blocking recv: a process that dies before it took its end of the pipe leaves no
                # end of file to see.
                while not await anyio.to_thread.run_sync(conn.poll, 0.5, abandon_on_cancel=True):
                    if not process.is_alive() and not conn.poll():
                        results[k] = ("failed", f"its worker process died (exit code {process.exitcode})")
                        return
                try:
                    results[k] = conn.recv()
                except EOFError:
                    results[k] = ("failed", f"its worker process died (exit code {process.exitcode})")

            async with anyio.create_task_group() as tg:
                for k, ((process, conn), shard) in enumerate(zip(started, shards, strict=True)):
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
            raise ShardFailedError("; ".join(failed)[:1000] + " (rerun the same command to resume)")
        return [results[k][1] for k in range(len(started))]
