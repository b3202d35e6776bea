"""One shard of a sharded session, wherever it runs: its own event loop, models and judges, the run's stages on
its conversations, its batches committed into the run folder beside the other shards'.

A shard reads what the folder already holds when it starts, so a shard run again (its worker was killed, the
session was interrupted) skips the pairs committed before and answers the calls paid for before from the shared
response cache: nothing is written twice, nothing paid twice. Where the shards may run on machines that share no
file system (:meth:`~delta_eval.executors.base.Executor.batch_numbers`) and the run is in an object store, each
attempt works in a working copy of its own pulled from the URI (:mod:`delta_eval.store.shard_copy`): the answers
taken from the cache are those uploaded. It writes neither the manifest nor the population rows: the session
does, once (see :mod:`delta_eval.runner`).
"""

from __future__ import annotations

import sqlite3
import time
from functools import partial
from pathlib import Path

import anyio

from delta_eval.adapters.pool import ModelPool
from delta_eval.calls import CallStats
from delta_eval.executors.base import COUNTERS, Shard, ShardReport
from delta_eval.executors.live import publish
from delta_eval.ingest.source import ConversationSource
from delta_eval.interrupts import handle_signals
from delta_eval.pipeline import Stages, run_stages
from delta_eval.progress import RunProgress
from delta_eval.run_models import build_models
from delta_eval.store import safe_paths
from delta_eval.store.cache import SQLiteCache
from delta_eval.store.folder import RunFolder
from delta_eval.store.remote import RemoteFolder
from delta_eval.store.sent import SentJournal
from delta_eval.store.session import Resume
from delta_eval.store.shard_copy import CACHE_NAME, shard_copy
from delta_eval.sync import run_loop

__all__ = ["arun_shard", "run_shard"]


def run_shard(shard: Shard) -> ShardReport:
    """Run ``shard`` to its end in an event loop of its own (the function an executor sends to a worker)."""

    async def main() -> ShardReport:
        with handle_signals():  # a stop signal (a cancelled task, Ctrl-C) commits the finished pairs, then stops
            return await arun_shard(shard)

    return run_loop(main)


async def arun_shard(shard: Shard) -> ShardReport:
    """Run ``shard`` in the running event loop."""
    c = shard.config
    if c.remote is None or shard.numbers is None:
        folder = RunFolder(c.out, shared=True)
        # A URI run folder: the shard uploads each batch it commits (its session pulled and synced the working
        # copy they share).
        folder.mirror = RemoteFolder.of_run(c.remote, c.out, c.cache_path)
        return await _run(shard, folder, c.cache_path, None)
    # Maybe on a machine of its own: a working copy of its own, pulled from the URI, its batches numbered by the
    # run (see delta_eval.store.shard_copy).
    own_cache = safe_paths.inside(c.out, c.cache_path)
    with shard_copy(c.remote, own_cache=own_cache) as remote:
        folder = RunFolder(remote.local)
        folder.mirror, folder.numbers = remote, shard.numbers
        return await _run(shard, folder, remote.local / CACHE_NAME if own_cache else c.cache_path, remote)


def _counted_then_kept(pool: ModelPool, cache: SQLiteCache) -> dict[str, CallStats]:
    """The shard's call counters, once every answer they count is committed to the cache: what it publishes, which
    an interrupted session records (a display too: a commit that fails is the shard's own calls' to raise)."""
    try:
        return cache.committed_counts(pool.stats())
    except sqlite3.OperationalError:
        return pool.stats()


async def _run(shard: Shard, folder: RunFolder, cache_path: Path, apart: RemoteFolder | None) -> ShardReport:
    """Run ``shard`` writing ``folder``, its answers in the response cache at ``cache_path``; ``apart``: the
    remote its counters are uploaded to (the folder is a working copy of its own)."""
    c = shard.config
    folder.header = shard.header
    models = await build_models(c, shard.source_name, shard.tool_simulator, limiters=shard.limiters)
    progress = RunProgress()
    try:
        cache = SQLiteCache(cache_path, root=folder.path)
        journal = SentJournal(folder.path, shard.session)
        try:
            models.pool.use_cache(cache)
            models.pool.use_journal(journal.record)
            ids = {conv.id for _, conv in shard.conversations}
            decided = await anyio.to_thread.run_sync(folder.read, "verdicts", ["conversation_id", "pair_id"])
            written = await anyio.to_thread.run_sync(folder.read, "conversations", ["conversation_id"])
            state = Resume(
                shard.manifest,
                done_pairs={pair for conv, pair in zip(*decided.to_pydict().values(), strict=True) if conv in ids},
                done_conversations=set(written.column("conversation_id").to_pylist()) & ids,
                population_committed=True,
            )
            source = ConversationSource.from_conversations([], name=shard.source_name)
            stages = Stages(
                c, source, folder, state, progress, models.recordings, None, last_commit=time.monotonic(),
                conversations=shard.conversations,
            )  # fmt: skip
            async with anyio.create_task_group() as tg:
                # The counters the session shows while the shards run (see delta_eval.executors.live).
                publishing = partial(publish, remote=apart)
                tg.start_soon(publishing, folder.path, shard.session, shard.index, progress,
                              partial(_counted_then_kept, models.pool, cache))  # fmt: skip
                await run_stages(stages, shard.sample, models.sides, models.cascade)
                tg.cancel_scope.cancel()
            report = ShardReport(
                shard.index,
                counters={name: getattr(progress, name) for name in COUNTERS},
                cost_usd=progress.cost_usd,
                calls=models.pool.stats(),
                cache=cache.stats(),
                notes=[*stages.notes, *models.pool.notes()],
            )
        finally:
            journal.close()
            cache.close()
    finally:
        await models.aclose()
    return report
