"""Live counters of a sharded run: each shard writes what it has done so far into the run folder every second, and
the session adds them up into its own :class:`~delta_eval.progress.RunProgress`, so a run spread over processes or
a Ray cluster shows its pairs decided, spend and calls as it goes, as a one-process run does.

The counters travel through the run folder, which every shard already shares (no other channel to open between
machines; see :mod:`delta_eval.store.live_files`): for shards in working copies of their own, through its object
store. The session removes them once its shards are done, and takes the
exact figures from the shards' reports.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import anyio

from delta_eval.calls import CallStats
from delta_eval.executors.base import COUNTERS
from delta_eval.pricing import total_cost
from delta_eval.progress import RunProgress
from delta_eval.store import safe_paths
from delta_eval.store.folder import write_json_atomic
from delta_eval.store.live_files import PROGRESS_DIR, progress_file, remove_progress
from delta_eval.store.remote import RemoteFolder

__all__ = ["EVERY_S", "ShardWatch", "publish", "snapshot"]

#: Seconds between two writes of a shard's counters, and two reads of the session.
EVERY_S = 1.0


def snapshot(progress: RunProgress, calls: Mapping[str, CallStats]) -> dict[str, Any]:
    """What a shard publishes: its counters (:data:`~delta_eval.executors.base.COUNTERS`), spend, calls by model."""
    return {
        "counters": {name: getattr(progress, name) for name in COUNTERS},
        "cost_usd": progress.cost_usd,
        "calls": {model: stats.model_dump() for model, stats in calls.items()},
    }


async def publish(
    root: Path,
    session: int,
    index: int,
    progress: RunProgress,
    calls: Callable[[], Mapping[str, CallStats]],
    every: float | None = None,
    remote: RemoteFolder | None = None,
) -> None:
    """Write shard ``index``'s counters every ``every`` seconds (default :data:`EVERY_S`) until cancelled, and
    once more then, so the last figures are there when the shard ends; each write uploaded to ``remote`` too (a
    shard in a working copy of its own: its session reads them there)."""
    safe_paths.mkdir(root, root / PROGRESS_DIR)
    path = progress_file(root, session, index)

    def write() -> None:
        # A display only (a full disk is no reason to stop a shard): the shard's report is exact.
        with contextlib.suppress(OSError):
            write_json_atomic(path, snapshot(progress, calls()), root=root)
            if remote is not None:
                remote.progress_written(path)

    try:
        while True:
            # On a worker thread when uploaded: a round trip to the store is no pause of the shard's loop.
            await anyio.to_thread.run_sync(write) if remote is not None else write()
            await anyio.sleep(EVERY_S if every is None else every)
    finally:
        write()  # no await: a cancelled shard still leaves its last figures


class ShardWatch:
    """The session's view of its shards' counters: :meth:`poll` adds every shard's last published figures to what
    the session had counted when the shards started; :meth:`calls` gives the calls by model the same way.

    Example::

        watch = ShardWatch(folder.path, session=2, progress=p)
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch.watch)
            ...                             # the shards run; p.decided, p.cost_usd grow as they publish
            tg.cancel_scope.cancel()
        watch.restore()                     # back to the session's own counts: the reports are added next
    """

    def __init__(
        self,
        root: Path,
        session: int,
        progress: RunProgress,
        own_calls: Callable[[], Mapping[str, CallStats]],
        remote: RemoteFolder | None = None,
    ) -> None:
        self.root = root
        #: Where shards in working copies of their own upload their counters (see :func:`publish`).
        self.remote = remote
        self.session = session
        self.progress = progress
        self.own_calls = own_calls
        self._base = {name: getattr(progress, name) for name in COUNTERS}
        self._base_cost = progress.cost_usd
        self._shard_calls: dict[str, CallStats] = {}

    def poll(self) -> int:
        """Read every shard's counters into the progress; returns how many shards have published."""
        if self.remote is not None:
            self.remote.pull_progress(self.session)
        directory = self.root / PROGRESS_DIR
        published: list[dict[str, Any]] = []
        if directory.is_dir() and not directory.is_symlink():
            for f in directory.glob(f"{self.session}-*.json"):
                try:
                    published.append(json.loads(f.read_text(encoding="utf-8")))
                except (OSError, ValueError):
                    continue  # replaced as it was read: the next poll reads the new one
        p = self.progress
        for name in COUNTERS:
            setattr(p, name, self._base[name] + sum(int(s["counters"].get(name, 0)) for s in published))
        p.cost_usd = total_cost((self._base_cost, *(s.get("cost_usd") for s in published)))
        calls: dict[str, CallStats] = {}
        for s in published:
            for model, stats in s.get("calls", {}).items():
                calls[model] = calls.get(model, CallStats()) + CallStats.model_validate(stats)
        self._shard_calls = calls
        return len(published)

    def shard_calls(self) -> dict[str, CallStats]:
        """The shards' calls by model, as they last published them (read by :meth:`poll`)."""
        return dict(self._shard_calls)

    def calls(self) -> dict[str, CallStats]:
        """The session's own calls and the shards' published ones, by model (what the progress display reads)."""
        out = dict(self.own_calls())
        for model, stats in self._shard_calls.items():
            out[model] = out.get(model, CallStats()) + stats
        return out

    async def watch(self, every: float | None = None) -> None:
        """:meth:`poll` every ``every`` seconds (default :data:`EVERY_S`) until cancelled."""
        while True:
            await anyio.to_thread.run_sync(self.poll)
            await anyio.sleep(EVERY_S if every is None else every)

    def restore(self) -> None:
        """Put the session's own counts back (the shards' reports are then added to them) and remove the shards'
        counter files."""
        for name in COUNTERS:
            setattr(self.progress, name, self._base[name])
        self.progress.cost_usd = self._base_cost
        self._shard_calls = {}
        remove_progress(self.root)
        if self.remote is not None:
            self.remote.remove_progress()
