"""Per-model concurrency and rate limits, with concurrency that adapts to rate-limit signals.

Each model gets one :class:`ModelLimiter`: a request-rate limit (aiolimiter's leaky bucket), a concurrency cap that
adapts as TCP's congestion window does (AIMD), and a pace taken from the provider's rate-limit headers.

- A 429 is not, alone, a rate limit: providers answer a steady few percent of calls with one whatever the load
  (the call's own retry handles it). The cap is halved when 429s are *sustained* (at least ``sustained`` of the
  last ``window`` outcomes, and at least five), or when a 429 comes with headers saying the limit is spent; at most
  once per ``cooldown`` seconds, and the outcomes counted so far are forgotten (one burst is one signal).
- Headers (see :mod:`~delta_eval.adapters.ratelimit_headers`) say how many requests are left and how fast they come
  back. The limiter keeps its own count from there: the requests left at the answered call's start, plus those
  returned since, minus those it let through since; a call waits while none is left (and after a 429's
  Retry-After, when the provider says the limit is spent). So a run keeps just under the provider's limit instead
  of hammering it, and runs at full speed where it has room.
- After successes the cap grows again by one every ``max(1, cap // 4)`` successes (about four a round trip): a cut
  is undone in a few seconds, not minutes.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Protocol

import anyio
from aiolimiter import AsyncLimiter
from pydantic import BaseModel, ConfigDict, Field

from delta_eval.adapters.ratelimit_headers import RateLimitSignal

__all__ = ["Limiter", "ModelLimiter", "ModelLimits", "Ticket"]


class ModelLimits(BaseModel):
    """Limits of one model: concurrent calls and requests per minute (``None``: the adapter's default)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_concurrency: int | None = Field(default=None, ge=1)
    requests_per_minute: float | None = Field(default=None, gt=0)
    adaptive: bool = True


@dataclass(frozen=True)
class Ticket:
    """One admitted call: when it was let through (on the limiter's clock), to place the headers of its answer."""

    sent_at: float


@dataclass(frozen=True)
class _Budget:
    """The provider's count of requests left, as of a call's start: ``remaining`` then, coming back at ``refill``
    per second (``None``: unknown; then the whole limit is back at ``reset_at``)."""

    sent_at: float
    remaining: float
    refill: float | None
    reset_at: float | None


class Limiter(Protocol):
    """What a model's client needs of its limiter: a slot per call, and the outcome of each call. A
    :class:`ModelLimiter` in this process, or one that asks a limiter shared by the processes of a run (see
    :mod:`delta_eval.executors`)."""

    def slot(self) -> AbstractAsyncContextManager[Ticket]:
        """Wait for a slot (and rate budget) and hold it for one call."""

    def observe(self, signal: RateLimitSignal | None, ticket: Ticket | None = None) -> None:
        """Take in what a call's rate-limit headers say."""

    def on_success(self, signal: RateLimitSignal | None = None, ticket: Ticket | None = None) -> None:
        """Record a successful call."""

    def on_rate_limited(self, signal: RateLimitSignal | None = None, ticket: Ticket | None = None) -> None:
        """Record a 429."""

    async def aclose(self) -> None:
        """The run is done with this model: give back whatever is held for other processes."""


class _Slot(AbstractAsyncContextManager[Ticket]):
    """One call's hold on a :class:`ModelLimiter`'s slot (a class, not a generator: it is entered on every call)."""

    __slots__ = ("_limiter", "_owner")

    def __init__(self, limiter: ModelLimiter) -> None:
        self._limiter = limiter
        self._owner = object()

    async def __aenter__(self) -> Ticket:
        return await self._limiter.acquire(self._owner, at_once=True)

    async def __aexit__(self, *exc_info: object) -> None:
        self._limiter.release(self._owner)


class ModelLimiter:
    """Admits calls to one model within its limits.

    Example::

        limiter = ModelLimiter(max_concurrency=4, requests_per_minute=600)
        async with limiter.slot() as ticket:
            ...  # one call; then limiter.on_success(signal, ticket) or limiter.on_rate_limited(signal, ticket)
    """

    def __init__(
        self,
        max_concurrency: int,
        requests_per_minute: float | None = None,
        adaptive: bool = True,
        cooldown: float = 1.0,
        *,
        window: int = 100,
        sustained: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_concurrency = max_concurrency
        self.adaptive = adaptive
        self.cooldown = cooldown
        self.sustained = sustained
        self._clock = clock
        self._capacity = anyio.CapacityLimiter(max_concurrency)
        self._rate = AsyncLimiter(requests_per_minute, 60.0) if requests_per_minute else None
        self._successes = 0
        self._last_decrease = -float("inf")
        self._outcomes: deque[bool] = deque(maxlen=window)  # True: a 429
        self._budget: _Budget | None = None
        self._sent: deque[float] = deque()  # when calls were let through since the budget's call started
        self._paused_until = -float("inf")
        # Callers waiting for the budget go one at a time, in turn; one that finds it free goes on without yielding
        # to the event loop (the slot it holds was a checkpoint already).
        self._admit = anyio.Lock(fast_acquire=True)
        self.rate_limited = 0

    @property
    def concurrency(self) -> int:
        """The current concurrency cap."""
        return int(self._capacity.total_tokens)

    def slot(self) -> AbstractAsyncContextManager[Ticket]:
        """Wait for a free slot (and rate budget), hold it for the duration of one call."""
        return _Slot(self)

    async def acquire(self, owner: object, *, at_once: bool = False) -> Ticket:
        """Take a slot for ``owner`` (any hashable token) and wait for the rate budget; :meth:`release` gives it
        back. :meth:`slot` in two halves, for a limiter that serves calls made in other processes.

        ``at_once``: a free slot is taken without yielding to the event loop, which anyio's acquire does even then
        (a pass of a loop with hundreds of calls in flight, and ~3% of a call's CPU with its cancel scopes); a call
        queued for a slot still keeps its turn. :meth:`slot` takes it so; the actor granting a batch of slots to
        another process yields between them (see :mod:`delta_eval.executors.ray_actors`)."""
        taken = False
        if at_once:
            try:
                self._capacity.acquire_on_behalf_of_nowait(owner)
                taken = True
            except anyio.WouldBlock:
                pass
        if not taken:
            await self._capacity.acquire_on_behalf_of(owner)
        try:
            if self._rate is not None:
                await self._rate.acquire()
            return Ticket(await self._admitted(at_once))
        except BaseException:
            self._capacity.release_on_behalf_of(owner)
            raise

    def release(self, owner: object) -> None:
        """Give back ``owner``'s slot."""
        self._capacity.release_on_behalf_of(owner)

    async def aclose(self) -> None:
        """Nothing to give back: the limiter is this process's own."""

    def ready(self) -> bool:
        """Whether :meth:`acquire` would let a call through now without waiting: a slot free with no one queued
        for it, the request rate and the provider's budget not spent, no pause."""
        return (
            self._capacity.available_tokens >= 1
            and self._capacity.statistics().tasks_waiting == 0
            and (self._rate is None or self._rate.has_capacity())
            and not self._admit.locked()
            and self.wait_s() <= 0
        )

    async def _admitted(self, at_once: bool = False) -> float:
        """Wait until the provider has a request left (as far as its headers tell), and count this one; ``at_once``:
        without entering the lock (and its checkpoint) when no one waits and a request is left."""
        if at_once and not self._admit.locked() and self.wait_s() <= 0:
            return self._count_sent()
        async with self._admit:
            while (wait := self.wait_s()) > 0:  # noqa: ASYNC110 -- a wait of known length, not for an event
                await anyio.sleep(wait)
            return self._count_sent()

    def _count_sent(self) -> float:
        """Count a request sent now (what :meth:`wait_s` holds against the provider's budget); its time."""
        now = self._clock()
        self._sent.append(now)
        return now

    def wait_s(self) -> float:
        """Seconds a call must wait now: for a pause the provider asked for, or for a request to come back."""
        now = self._clock()
        if now < self._paused_until:
            return self._paused_until - now
        b = self._budget
        if b is None:
            return 0.0
        while self._sent and self._sent[0] <= b.sent_at:
            self._sent.popleft()  # counted by the provider already
        if b.reset_at is not None and now >= b.reset_at:
            self._budget = None  # the whole limit is back
            return 0.0
        # One request kept in hand: an answer reports the count as of its arrival, and a call sent just before may
        # reach the provider after it (the last request of a spent limit is where a 429 would come from).
        left = b.remaining - 1 - len(self._sent)
        if b.refill is not None:
            left += b.refill * (now - b.sent_at)
            return 0.0 if left >= 1 else (1 - left) / b.refill
        if left >= 1:
            return 0.0
        return (b.reset_at - now) if b.reset_at is not None else 0.0

    def observe(self, signal: RateLimitSignal | None, ticket: Ticket | None = None) -> None:
        """Take in what a call's rate-limit headers say (its ``ticket`` tells when it started)."""
        if signal is None or not self.adaptive:
            return
        now = self._clock()
        if signal.remaining is not None and ticket is not None:
            b = self._budget
            if b is None or ticket.sent_at >= b.sent_at:  # answers come back out of order: keep the latest start
                refill = signal.refill_per_s or (b.refill if b is not None else None)
                reset_at = now + signal.reset_s if signal.reset_s is not None else None
                self._budget = _Budget(ticket.sent_at, max(0.0, signal.remaining), refill, reset_at)
        if signal.exhausted and signal.retry_after:
            self._paused_until = max(self._paused_until, now + signal.retry_after)

    def on_success(self, signal: RateLimitSignal | None = None, ticket: Ticket | None = None) -> None:
        """Record a successful call (and its headers); every ``max(1, cap // 4)`` successes the cap grows by one."""
        self.observe(signal, ticket)
        if not self.adaptive:
            return
        self._outcomes.append(False)
        if self.concurrency >= self.max_concurrency:
            return
        self._successes += 1
        if self._successes >= max(1, self.concurrency // 4):
            self._capacity.total_tokens = self.concurrency + 1
            self._successes = 0

    def on_rate_limited(self, signal: RateLimitSignal | None = None, ticket: Ticket | None = None) -> None:
        """Record a 429 (and its headers). The cap is halved (never below one, at most once per ``cooldown``) when
        the headers say the limit is spent or 429s are sustained; a stray one only counts."""
        self.rate_limited += 1
        self.observe(signal, ticket)
        if not self.adaptive:
            return
        self._outcomes.append(True)
        hits = sum(self._outcomes)
        spent = signal is not None and signal.exhausted
        if not spent and hits < max(5, self.sustained * len(self._outcomes)):
            return  # noise: the call's own retry deals with it
        now = self._clock()
        if signal is not None and signal.retry_after:
            self._paused_until = max(self._paused_until, now + signal.retry_after)
        if now - self._last_decrease >= self.cooldown:
            self._capacity.total_tokens = max(1, self.concurrency // 2)
            self._last_decrease = now
            self._successes = 0
            self._outcomes.clear()  # the 429s of this burst are spent on this cut
