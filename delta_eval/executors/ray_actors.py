"""The actors of a run on Ray: the limiter of every model (:class:`LimiterHost`, holding a :class:`LimiterActor`
per model) and the batch numbers of shards that share no file system (:class:`BatchNumbers`).

Each actor is a Python process of its own, which imports this module (Ray sends the class by its path): it imports
only the limiters (:mod:`delta_eval.adapters.limits`), not the shards' code (the run folder, Arrow, the pipeline),
so that an actor's start costs little CPU on the cores the shards start on. :mod:`delta_eval.executors.ray_cluster`
uses them.
"""

from __future__ import annotations

from typing import Any

from delta_eval.adapters.limits import ModelLimiter, ModelLimits

__all__ = ["BatchNumbers", "LimiterActor", "LimiterHost"]


class LimiterActor:
    """The limiter of one model for every shard of a run (held by the run's :class:`LimiterHost`, a Ray actor).

    Slots are held per *holder*, one per shard attempt (:meth:`open`): a shard started again after its worker died
    opens a new holder, which gives back what the dead attempt held and any slot the actor grants it later.
    """

    def __init__(self, limits: ModelLimits) -> None:
        assert limits.max_concurrency is not None
        self.limiter = ModelLimiter(limits.max_concurrency, limits.requests_per_minute, adaptive=limits.adaptive)
        self._next = 0
        self._held: dict[str, set[int]] = {}
        self._shard_of: dict[str, int] = {}
        self._closed: set[str] = set()

    async def open(self, shard: int, holder: str) -> None:
        """Start ``holder``, the slots of an attempt at ``shard``: every earlier attempt's are given back."""
        for other, of in list(self._shard_of.items()):
            if of == shard and other != holder:
                await self.close(other)
        self._shard_of[holder] = shard
        self._held.setdefault(holder, set())

    async def acquire_many(
        self,
        holder: str,
        want: int,
        released: list[int] | None = None,
        outcomes: list[tuple[str, Any, Any]] | None = None,
    ) -> list[tuple[int, float]]:
        """Slots for ``holder``: wait for one, then take up to ``want`` in all while more are free at once. Each
        is its token and when it was let through. A holder closed meanwhile gets none (they are given back).
        ``released`` and ``outcomes`` are settled first (:meth:`settle`): the holder sends them with its ask."""
        if released or outcomes:
            await self.settle(holder, released or [], outcomes or [])
        got: list[tuple[int, float]] = []
        while not got or (len(got) < want and self.limiter.ready()):
            self._next += 1
            owner = self._next
            ticket = await self.limiter.acquire(owner)
            got.append((owner, ticket.sent_at))
            if holder in self._closed:
                # The batch's earlier slots were the holder's, and close gave them back: only this one is left.
                self.limiter.release(owner)
                return []
            self._held.setdefault(holder, set()).add(owner)
        return got

    async def settle(self, holder: str, released: list[int], outcomes: list[tuple[str, Any, Any]]) -> None:
        """What ``holder`` sends in one message: the outcomes of its calls (``("on_success" | "on_rate_limited" |
        "observe", signal, ticket)``, in order), then the slots it gives back."""
        for kind, signal, ticket in outcomes:
            if kind in ("on_success", "on_rate_limited", "observe"):
                getattr(self.limiter, kind)(signal, ticket)
        held = self._held.get(holder, set())
        for owner in released:
            if owner in held:
                held.discard(owner)
                self.limiter.release(owner)

    async def close(self, holder: str) -> None:
        """Give back every slot ``holder`` holds; slots granted to it later are given back as they are taken."""
        self._closed.add(holder)
        self._shard_of.pop(holder, None)
        for owner in self._held.pop(holder, set()):
            self.limiter.release(owner)

    async def concurrency(self) -> int:
        """The current concurrency cap."""
        return self.limiter.concurrency

    async def borrowed(self) -> int:
        """How many slots are held now, by every holder."""
        return sum(len(h) for h in self._held.values())


class LimiterHost:
    """The :class:`LimiterActor` of every model of a run, in one Ray actor: each method is the model's.

    One actor for all the models, not one each: an actor is a Python process of its own that imports this module
    when the run starts (on the cores the shards start on) and sends and takes its messages on threads of its own.
    The models' limits stay apart: each model has its own limiter here.
    """

    def __init__(self, limits: dict[str, ModelLimits]) -> None:
        self.models = {model: LimiterActor(lim) for model, lim in limits.items()}

    async def open(self, model: str, shard: int, holder: str) -> None:
        """:meth:`LimiterActor.open` of ``model``."""
        await self.models[model].open(shard, holder)

    async def acquire_many(
        self,
        model: str,
        holder: str,
        want: int,
        released: list[int] | None = None,
        outcomes: list[tuple[str, Any, Any]] | None = None,
    ) -> list[tuple[int, float]]:
        """:meth:`LimiterActor.acquire_many` of ``model``."""
        return await self.models[model].acquire_many(holder, want, released, outcomes)

    async def settle(self, model: str, holder: str, released: list[int], outcomes: list[tuple[str, Any, Any]]) -> None:
        """:meth:`LimiterActor.settle` of ``model``."""
        await self.models[model].settle(holder, released, outcomes)

    async def close(self, model: str, holder: str) -> None:
        """:meth:`LimiterActor.close` of ``model``."""
        await self.models[model].close(holder)

    async def concurrency(self, model: str) -> int:
        """:meth:`LimiterActor.concurrency` of ``model``."""
        return await self.models[model].concurrency()

    async def borrowed(self, model: str) -> int:
        """:meth:`LimiterActor.borrowed` of ``model``."""
        return await self.models[model].borrowed()


class BatchNumbers:
    """The batch numbers of a run's shards (run as a Ray actor, one call at a time): each number taken once, so
    shards that share no file system, hence no commit lock, never write the same batch."""

    def __init__(self) -> None:
        self.last = 0

    def take(self, after: int) -> int:
        """A number above ``after`` (the highest the caller's working copy holds) and every number taken."""
        self.last = max(self.last, after) + 1
        return self.last
