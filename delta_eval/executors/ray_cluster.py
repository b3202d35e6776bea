"""The shards of a run as tasks of a Ray cluster (``pip install 'delta-eval[ray]'``).

Each shard is one Ray task (one CPU) running :func:`~delta_eval.executors.shard.run_shard` in its own event loop
on whichever node Ray places it; every node must see the run folder at the same path (a local folder for a cluster
on one machine, a shared file system across machines), or the run folder is in an object store (``out="s3://..."``):
each attempt at a shard then works in a working copy of its own on its node, pulled from the URI, and takes its
batch numbers from one Ray actor of the run (:class:`BatchNumbers`; see :mod:`delta_eval.store.shard_copy`). A
model's limits stay global: one :class:`~delta_eval.adapters.limits.ModelLimiter` per model, each in a
:class:`LimiterActor`, all of them held by one Ray actor of the run (:class:`LimiterHost`), and every call of every
shard holds a slot taken there (leased a batch at a time, see :class:`RemoteLimiter`). A worker that dies mid-shard
has its task retried by Ray (``max_retries``): the retry skips the pairs the dead one committed, takes the answers
it had from the response cache, and the slots the dead one held are given back when the retry starts.

Ray is imported only when a :class:`RayExecutor` is used: the library does not need it otherwise.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any

import anyio

from delta_eval.adapters.limits import Limiter, ModelLimits, Ticket
from delta_eval.adapters.ratelimit_headers import RateLimitSignal
from delta_eval.exceptions import ConfigError
from delta_eval.executors.base import Executor, Shard, ShardReport, SplitLimiters
from delta_eval.executors.local import ShardFailedError
from delta_eval.executors.ray_actors import BatchNumbers, LimiterActor, LimiterHost
from delta_eval.executors.shard import run_shard

__all__ = [
    "BatchNumbers", "LimiterActor", "LimiterHost", "ModelHandle", "RayBatchNumbers", "RayExecutor", "RayLimiters",
    "RemoteLimiter",
]  # fmt: skip


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ConfigError("RayExecutor needs Ray: pip install 'delta-eval[ray]'") from None
    return ray


def _last_error_line(traceback_text: str) -> str:
    """The last line of a traceback's text that says something: the error, also where an exception group's drawing
    (``+----``, ``|``) ends the text, as it does when a shard's task group raised."""
    for line in reversed(traceback_text.splitlines()):
        said = line.strip().lstrip("|+").strip()
        if said and not set(said) <= set("-+| 0123456789"):
            return said
    return ""


@dataclass(frozen=True)
class ModelHandle:
    """One model's :class:`LimiterActor` as a shard calls it: ``handle.method.remote(*args)`` is the
    :class:`LimiterHost`'s ``method`` of that model (what a handle of an actor of the model's own would take)."""

    host: Any
    model: str

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # pickling and copying look up dunders: this handle has none of its own
            raise AttributeError(name)
        return _ModelMethod(getattr(self.host, name), self.model)


@dataclass(frozen=True)
class _ModelMethod:
    method: Any
    model: str

    def remote(self, *args: Any) -> Any:
        return self.method.remote(self.model, *args)


#: How many calls of a shard one slot taken from the actor may serve in turn, when the model has neither a request
#: rate nor an adaptive cap (the slot is then only a count, so passing it on keeps the model's limit): the shard
#: asks the actor once per this many calls. A bound, so that slots flow back and every shard gets its share.
LEASE_REUSES = 16
#: The most slots a shard asks the actor for in one message.
LEASE_BATCH = 64
#: Seconds a shard gathers the slots it gives back and its calls' outcomes before sending them in one message.
SETTLE_S = 0.005
#: Seconds a shard keeps a slot no call of its own waits for (one with uses left) for its next call, before giving
#: it back. A pair's next turn asks for a slot soon after its last call ends (later on a busy event loop), and a
#: slot kept spares the two messages of giving it back and leasing another, each about as costly (a millisecond of
#: CPU on the shard and as much on the actor, on this kind of machine) as a call's own HTTP work. Slots kept idle
#: reach another shard that late, which only matters while the model's cap is all taken.
LINGER_S = 0.25


@dataclass(slots=True)
class _Lease:
    owner: int
    sent_at: float
    uses: int
    idle_since: float = 0.0


class RemoteLimiter:
    """A model's limiter as one shard sees it: slots leased from the model's :class:`LimiterActor`.

    A round trip to the actor per call would cost more CPU than the call's own HTTP work, so the shard asks for as
    many slots as it has calls waiting in one message, passes a slot from one of its calls to the next one (up to
    :data:`LEASE_REUSES` calls, only where the slot is a mere count: to a waiting call at once, else to the next
    call that asks within :data:`LINGER_S` seconds), and sends the slots it gives back and the outcomes the actor
    adapts to every :data:`SETTLE_S` seconds in one message. Never more calls in flight than the actor's cap: a
    slot serves one call at a time.

    Ray's object refs are awaited on asyncio, the shard's event loop.
    """

    def __init__(self, actor: Any, holder: str, limits: ModelLimits) -> None:
        self.actor = actor
        self.holder = holder
        self.reuses = LEASE_REUSES if limits.requests_per_minute is None and not limits.adaptive else 1
        self.reports = limits.adaptive  # a model that does not adapt takes nothing from its calls' outcomes
        self._waiters: deque[asyncio.Future[_Lease]] = deque()
        self._idle: deque[_Lease] = deque()  # slots with uses left that no call holds, the longest idle first
        self._fetcher: asyncio.Task[None] | None = None
        self._released: list[int] = []
        self._outcomes: list[tuple[str, Any, Any]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._closed = False

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[Ticket]:
        """A slot (leased from the actor, or passed on from a call of this shard that ended), held for one call."""
        lease = await self._take()
        try:
            yield Ticket(lease.sent_at)
        finally:
            lease.uses -= 1
            self._give_back(lease)

    def observe(self, signal: RateLimitSignal | None, ticket: Ticket | None = None) -> None:
        """Send the call's rate-limit headers to the actor (with the next message)."""
        self._report("observe", signal, ticket)

    def on_success(self, signal: RateLimitSignal | None = None, ticket: Ticket | None = None) -> None:
        """Send a success to the actor (with the next message)."""
        self._report("on_success", signal, ticket)

    def on_rate_limited(self, signal: RateLimitSignal | None = None, ticket: Ticket | None = None) -> None:
        """Send a 429 to the actor (with the next message)."""
        self._report("on_rate_limited", signal, ticket)

    async def aclose(self) -> None:
        """Give every slot back and send what is gathered: the shard is done with this model."""
        self._closed = True
        if self._fetcher is not None and not self._fetcher.done():
            self._fetcher.cancel()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        outcomes, self._outcomes, self._released = self._outcomes, [], []
        await self.actor.settle.remote(self.holder, [], outcomes)
        await self.actor.close.remote(self.holder)

    async def _take(self) -> _Lease:
        if self._closed:
            raise RuntimeError(f"the limiter of {self.holder} is closed: its shard is done with the model")
        if self._idle:
            return self._idle.pop()  # the slot idle the shortest: the others are given back the sooner
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[_Lease] = loop.create_future()
        self._waiters.append(waiter)
        if self._fetcher is None or self._fetcher.done():
            self._fetcher = loop.create_task(self._fetch())
        try:
            return await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                self._give_back(waiter.result())  # handed a slot just as it was cancelled: pass it on
            elif waiter in self._waiters:
                self._waiters.remove(waiter)
            raise

    async def _fetch(self) -> None:
        """Ask the actor for slots while calls wait for one."""
        try:
            while self._waiters and not self._closed:
                want = min(len(self._waiters), LEASE_BATCH)
                released, outcomes = self._take_gathered()  # sent with the ask: one message, not two
                granted = await self.actor.acquire_many.remote(self.holder, want, released, outcomes)
                if not granted:  # the actor closed this holder: a newer attempt at the shard replaced this one
                    raise ShardFailedError(f"shard attempt {self.holder} was replaced by a newer one; it stops here")
                for owner, sent_at in granted:
                    # A slot no call waits for any more (the calls asking were cancelled) goes back at once.
                    self._give_back(_Lease(owner, sent_at, self.reuses), keep=False)
        except Exception as exc:  # the actor is gone, or this attempt replaced: every waiting call fails with why
            while self._waiters:
                waiter = self._waiters.popleft()
                if not waiter.done():
                    waiter.set_exception(exc)

    def _give_back(self, lease: _Lease, *, keep: bool = True) -> None:
        """Pass ``lease`` to the next waiting call while it has uses left, else keep it for the next call (see
        :data:`LINGER_S`; where ``keep``), else give it back to the actor."""
        while lease.uses > 0 and self._waiters and not self._closed:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(lease)
                return
        if keep and lease.uses > 0 and not self._closed:
            lease.idle_since = time.monotonic()
            self._idle.append(lease)
        else:
            self._released.append(lease.owner)
        self._schedule()

    def _report(self, kind: str, signal: RateLimitSignal | None, ticket: Ticket | None) -> None:
        if self.reports and not self._closed:
            self._outcomes.append((kind, signal, ticket))
            self._schedule()

    def _schedule(self) -> None:
        if self._timer is None and not self._closed:
            self._timer = asyncio.get_running_loop().call_later(SETTLE_S, self._settle)

    def _settle(self) -> None:
        self._timer = None
        released, outcomes = self._take_gathered()
        if self._idle:
            self._schedule()  # to give back those still idle when their time is up
        if released or outcomes:
            self.actor.settle.remote(self.holder, released, outcomes)

    def _take_gathered(self) -> tuple[list[int], list[tuple[str, Any, Any]]]:
        """The slots to give back (with those idle for :data:`LINGER_S`) and the outcomes gathered, taken to send."""
        expired = time.monotonic() - LINGER_S
        while self._idle and self._idle[0].idle_since <= expired:
            self._released.append(self._idle.popleft().owner)
        released, self._released = self._released, []
        outcomes, self._outcomes = self._outcomes, []
        return released, outcomes


@dataclass(frozen=True)
class RayLimiters:
    """The limiter factory of one shard: each model's :class:`RemoteLimiter` (on its :class:`ModelHandle`; a model
    no actor holds, which the session did not build, gets its share of the limits in the shard's process)."""

    actors: dict[str, Any]
    shard: int
    shards: int

    def __call__(self, model: str, limits: ModelLimits) -> Limiter:
        actor = self.actors.get(model)
        if actor is None:
            return SplitLimiters(self.shards)(model, limits)
        holder = f"{self.shard}-{uuid.uuid4().hex}"
        # Not waited for: the shard sets up its models meanwhile, while the actor may still be starting (its asks
        # then wait there). Whichever of this and the holder's first ask the actor runs first, the holder's slots
        # are its own, and the slots of the shard's earlier attempts are given back once this has run.
        actor.open.remote(self.shard, holder)
        return RemoteLimiter(actor, holder, limits)


@dataclass(frozen=True)
class RayBatchNumbers:
    """A shard's numbering of its batches: each number taken from the run's :class:`BatchNumbers` actor."""

    actor: Any

    def __call__(self, after: int) -> int:
        return int(_ray().get(self.actor.take.remote(after)))


class RayExecutor(Executor):
    """Run the shards as tasks of a Ray cluster.

    ``address``: the cluster's (``"127.0.0.1:6379"``, ``"ray://host:10001"``, ``"auto"``); ``None`` connects to
    the cluster ``ray.init()`` finds (``RAY_ADDRESS``), or starts one on this machine. ``shards``: how many tasks
    (default: the cluster's CPUs). ``max_retries``: how many times Ray runs a shard again whose worker died.

    Example::

        de.run("run.toml", executor=de.RayExecutor(address="10.0.0.5:6379"))
    """

    def __init__(self, address: str | None = None, *, shards: int | None = None, max_retries: int = 3) -> None:
        self.address = address
        self.shards = shards
        self.max_retries = max_retries
        self._connected_here = False

    def __repr__(self) -> str:
        return f"RayExecutor(address={self.address!r}, shards={self.shards!r})"

    def _connect(self) -> Any:
        ray = _ray()
        if not ray.is_initialized():
            ray.init(address=self.address, logging_level=logging.WARNING, log_to_driver=False)
            self._connected_here = True
        return ray

    def shard_count(self) -> int:
        """``shards``, or the cluster's CPUs."""
        ray = self._connect()
        return self.shards or max(1, int(ray.cluster_resources().get("CPU", 1)))

    def batch_numbers(self) -> RayBatchNumbers:
        """A numbering actor for the run's shards (their nodes may share no file system)."""
        ray = self._connect()
        return RayBatchNumbers(ray.remote(num_cpus=0)(BatchNumbers).remote())

    async def run(self, shards: list[Shard], limits: dict[str, ModelLimits]) -> list[ShardReport]:
        """Submit a task per shard, with the models' limiters in one actor, and wait for every report."""
        ray = self._connect()
        # No task events for the actor's messages: recording each (for Ray's dashboard and timeline) is a share of
        # what a message costs, and a run sends hundreds.
        host_class = ray.remote(num_cpus=0, max_concurrency=100_000, enable_task_events=False)(LimiterHost)
        host = host_class.remote(limits) if limits else None
        actors = {model: ModelHandle(host, model) for model in limits}
        task = ray.remote(run_shard).options(num_cpus=1, max_retries=self.max_retries, retry_exceptions=False)
        refs = [task.remote(replace(s, limiters=RayLimiters(actors, s.index, len(shards)))) for s in shards]
        try:
            reports = []
            for ref in refs:
                try:
                    reports.append(await ref)
                except ray.exceptions.RayError as exc:
                    why = _last_error_line(str(exc)) or type(exc).__name__
                    raise ShardFailedError(f"a shard failed: {why[:500]} (rerun the same command to resume)") from None
            return reports
        except BaseException:
            for ref in refs:
                ray.cancel(ref)  # a KeyboardInterrupt in the task: the shard commits its finished pairs and ends
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(lambda: ray.wait(refs, num_returns=len(refs), timeout=60))
            raise
        finally:
            if host is not None:
                ray.kill(host)
            if self._connected_here:
                ray.shutdown()
                self._connected_here = False
