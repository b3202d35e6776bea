"""Per-model concurrency and rate limits, with concurrency that adapts to rate-limit signals.

Each model gets one :class:`ModelLimiter`: a request-rate limit (aiolimiter's leaky bucket) and a concurrency cap
that adapts as TCP's congestion window does (AIMD): it halves on a 429, at most once per ``cooldown`` seconds
(the 429s of one burst are one signal, not many), and grows by one after each window of as many successes as the
cap itself. A run so settles just under the provider's real limit instead of hammering it.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from aiolimiter import AsyncLimiter
from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ModelLimiter", "ModelLimits"]


class ModelLimits(BaseModel):
    """Limits of one model: concurrent calls and requests per minute (``None``: the adapter's default)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_concurrency: int | None = Field(default=None, ge=1)
    requests_per_minute: float | None = Field(default=None, gt=0)
    adaptive: bool = True


class ModelLimiter:
    """Admits calls to one model within its limits.

    Example::

        limiter = ModelLimiter(max_concurrency=4, requests_per_minute=600)
        async with limiter.slot():
            ...  # one call
    """

    def __init__(
        self,
        max_concurrency: int,
        requests_per_minute: float | None = None,
        adaptive: bool = True,
        cooldown: float = 1.0,
    ) -> None:
        self.max_concurrency = max_concurrency
        self.adaptive = adaptive
        self.cooldown = cooldown
        self._capacity = anyio.CapacityLimiter(max_concurrency)
        self._rate = AsyncLimiter(requests_per_minute, 60.0) if requests_per_minute else None
        self._successes = 0
        self._last_decrease = -float("inf")
        self.rate_limited = 0

    @property
    def concurrency(self) -> int:
        """The current concurrency cap."""
        return int(self._capacity.total_tokens)

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Wait for a free slot (and rate budget), hold it for the duration of one call."""
        async with self._capacity:
            if self._rate is not None:
                await self._rate.acquire()
            yield

    def on_success(self) -> None:
        """Record a successful call; after a window of ``concurrency`` successes the cap grows by one."""
        if not self.adaptive or self.concurrency >= self.max_concurrency:
            return
        self._successes += 1
        if self._successes >= self.concurrency:
            self._capacity.total_tokens = self.concurrency + 1
            self._successes = 0

    def on_rate_limited(self) -> None:
        """Record a 429; halves the cap (never below one), unless it was already halved within ``cooldown``."""
        self.rate_limited += 1
        now = time.monotonic()
        if self.adaptive and now - self._last_decrease >= self.cooldown:
            self._capacity.total_tokens = max(1, self.concurrency // 2)
            self._last_decrease = now
            self._successes = 0
