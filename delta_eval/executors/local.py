"""Executors on this machine: the shards as tasks of this process's event loop, or one process per core.

:class:`ProcessExecutor` is what uses every core of one machine: one event loop per process, each with its share
of every model's limits (:class:`~delta_eval.executors.base.SplitLimiters`), started with ``spawn`` (so the shard,
its configuration and a tool simulator of yours must pickle) and stopped with SIGTERM, which makes each shard
commit its finished pairs before it ends.
"""

from __future__ import annotations

import multiprocessing
import os
import traceback
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection
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


def _child(shard: Shard, conn: Connection) -> None:
    """A worker process: run the shard, send its report (or its error) back."""
    try:
        conn.send(("ok", run_shard(shard)))
    except BaseException as exc:
        text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        conn.send(("interrupted" if isinstance(exc, KeyboardInterrupt) else "failed", text[:2000]))
    finally:
        conn.close()


@dataclass(frozen=True)
class ProcessExecutor(Executor):
    """One process per shard on this machine, ``workers`` of them (default: one per core).

    Example::

        de.run(config, executor=de.ProcessExecutor())   # every core of this machine
    """

    workers: int | None = None

    def shard_count(self) -> int:
        """``workers``, or the number of cores."""
        return max(1, self.workers or os.cpu_count() or 1)

    async def run(self, shards: list[Shard], limits: dict[str, ModelLimits]) -> list[ShardReport]:
        """Start a process per shard and wait for every report; on cancellation, stop them (each commits first)."""
        ctx = multiprocessing.get_context("spawn")
        split = SplitLimiters(len(shards))
        started: list[tuple[Any, Connection]] = []
        try:
            for shard in shards:
                mine, theirs = ctx.Pipe(duplex=False)
                process = ctx.Process(target=_child, args=(replace(shard, limiters=split), theirs), daemon=True)
                process.start()
                theirs.close()
                started.append((process, mine))
            results: dict[int, tuple[str, Any]] = {}

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
                for k, (process, conn) in enumerate(started):
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
