"""The shards of a run as tasks of a Ray cluster (``pip install 'delta-eval[ray]'``).

Each shard is one Ray task (one CPU) running :func:`~delta_eval.executors.shard.run_shard` in its own event loop
on whichever node Ray places it; every node must see the run folder at the same path (a local folder for a cluster
on one machine, a shared file system across machines). A model's limits stay global: one Ray actor per model holds
its :class:`~delta_eval.adapters.limits.ModelLimiter`, and every call of every shard takes its slot there (a round
trip to the actor per call, against the provider's hundreds of milliseconds). A worker that dies mid-shard has its
task retried by Ray (``max_retries``): the retry skips the pairs the dead one committed, takes the answers it had
from the response cache, and the slots the dead one held are given back when the retry starts.

Ray is imported only when a :class:`RayExecutor` is used: the library does not need it otherwise.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any

import anyio

from delta_eval.adapters.limits import Limiter, ModelLimiter, ModelLimits, Ticket
from delta_eval.adapters.ratelimit_headers import RateLimitSignal
from delta_eval.exceptions import ConfigError
from delta_eval.executors.base import Executor, Shard, ShardReport, SplitLimiters
from delta_eval.executors.local import ShardFailedError
from delta_eval.executors.shard import run_shard

__all__ = ["LimiterActor", "RayExecutor", "RayLimiters", "RemoteLimiter"]


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ConfigError("RayExecutor needs Ray: pip install 'delta-eval[ray]'") from None
    return ray


class LimiterActor:
    """The limiter of one model for every shard of a run (run as a Ray actor): slots are held per shard, so that a
    shard started again after its worker died first gives back what the dead one held (:meth:`forget`)."""

    def __init__(self, limits: ModelLimits) -> None:
        assert limits.max_concurrency is not None
        self.limiter = ModelLimiter(limits.max_concurrency, limits.requests_per_minute, adaptive=limits.adaptive)
        self._next = 0
        self._held: dict[int, set[int]] = {}

    async def acquire(self, shard: int) -> tuple[int, float]:
        """A slot for a call of ``shard``: its token and when it was let through (for :meth:`release`)."""
        self._next += 1
        owner = self._next
        ticket = await self.limiter.acquire(owner)
        self._held.setdefault(shard, set()).add(owner)
        return owner, ticket.sent_at

    async def release(self, taken: tuple[int, float], shard: int) -> None:
        """Give back the slot ``taken`` (what :meth:`acquire` returned)."""
        if taken[0] in self._held.get(shard, set()):
            self._held[shard].discard(taken[0])
            self.limiter.release(taken[0])

    async def forget(self, shard: int) -> None:
        """Give back every slot ``shard`` holds (its earlier worker died holding them)."""
        for owner in self._held.pop(shard, set()):
            self.limiter.release(owner)

    async def observe(self, signal: RateLimitSignal | None, ticket: Ticket | None) -> None:
        """See :meth:`ModelLimiter.observe`."""
        self.limiter.observe(signal, ticket)

    async def on_success(self, signal: RateLimitSignal | None, ticket: Ticket | None) -> None:
        """See :meth:`ModelLimiter.on_success`."""
        self.limiter.on_success(signal, ticket)

    async def on_rate_limited(self, signal: RateLimitSignal | None, ticket: Ticket | None) -> None:
        """See :meth:`ModelLimiter.on_rate_limited`."""
        self.limiter.on_rate_limited(signal, ticket)

    async def concurrency(self) -> int:
        """The current concurrency cap."""
        return self.limiter.concurrency


@dataclass
class RemoteLimiter:
    """A model's limiter as one shard sees it: each slot is taken from the model's :class:`LimiterActor`; outcomes
    are sent to it without waiting."""

    actor: Any
    shard: int

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[Ticket]:
        """A slot from the actor, held for one call."""
        ref = self.actor.acquire.remote(self.shard)
        try:
            taken = await ref
        except BaseException:
            # Cancelled while the actor was admitting it: the slot is given back once it is taken.
            self.actor.release.remote(ref, self.shard)
            raise
        try:
            yield Ticket(taken[1])
        finally:
            self.actor.release.remote(taken, self.shard)

    def observe(self, signal: RateLimitSignal | None, ticket: Ticket | None = None) -> None:
        """Send the call's rate-limit headers to the actor."""
        self.actor.observe.remote(signal, ticket)

    def on_success(self, signal: RateLimitSignal | None = None, ticket: Ticket | None = None) -> None:
        """Send a success to the actor."""
        self.actor.on_success.remote(signal, ticket)

    def on_rate_limited(self, signal: RateLimitSignal | None = None, ticket: Ticket | None = None) -> None:
        """Send a 429 to the actor."""
        self.actor.on_rate_limited.remote(signal, ticket)


@dataclass(frozen=True)
class RayLimiters:
    """The limiter factory of one shard: each model's :class:`RemoteLimiter` (a model no actor holds, which the
    session did not build, gets its share of the limits in the shard's process)."""

    actors: dict[str, Any]
    shard: int
    shards: int

    def __call__(self, model: str, limits: ModelLimits) -> Limiter:
        actor = self.actors.get(model)
        if actor is None:
            return SplitLimiters(self.shards)(model, limits)
        ray = _ray()
        ray.get(actor.forget.remote(self.shard))  # before this shard's first call
        return RemoteLimiter(actor, self.shard)


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

    async def run(self, shards: list[Shard], limits: dict[str, ModelLimits]) -> list[ShardReport]:
        """Submit a task per shard, with one limiter actor per model, and wait for every report."""
        ray = self._connect()
        actor_class = ray.remote(num_cpus=0, max_concurrency=100_000)(LimiterActor)
        actors = {model: actor_class.remote(lim) for model, lim in limits.items()}
        task = ray.remote(run_shard).options(num_cpus=1, max_retries=self.max_retries, retry_exceptions=False)
        refs = [task.remote(replace(s, limiters=RayLimiters(actors, s.index, len(shards)))) for s in shards]
        try:
            reports = []
            for ref in refs:
                try:
                    reports.append(await ref)
                except ray.exceptions.RayError as exc:
                    why = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
                    raise ShardFailedError(f"a shard failed: {why[:500]} (rerun the same command to resume)") from None
            return reports
        except BaseException:
            for ref in refs:
                ray.cancel(ref)  # a KeyboardInterrupt in the task: the shard commits its finished pairs and ends
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(lambda: ray.wait(refs, num_returns=len(refs), timeout=60))
            raise
        finally:
            for actor in actors.values():
                ray.kill(actor)
            if self._connected_here:
                ray.shutdown()
                self._connected_here = False
