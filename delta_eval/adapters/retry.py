"""Retry with jittered exponential backoff, honouring the provider's Retry-After.

The one place calls are retried: adapters construct their SDK clients with the SDK's own retries off, so a failing
call is never retried by two layers at once.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
from pydantic import BaseModel, ConfigDict, Field

from delta_eval.exceptions import ProviderError

__all__ = ["RetryPolicy", "call_with_retry"]

T = TypeVar("T")


class RetryPolicy(BaseModel):
    """How often and how patiently to retry a retryable provider error.

    The wait before attempt ``k+1`` is drawn uniformly from ``[0, min(max_wait, initial_wait * 2**(k-1))]`` ("full
    jitter", so many workers hit by the same 429 do not come back in lockstep); when the provider sent Retry-After,
    the wait is at least that (up to ``max_retry_after``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_attempts: int = Field(default=6, ge=1)
    initial_wait: float = Field(default=1.0, ge=0)
    max_wait: float = Field(default=60.0, ge=0)
    max_retry_after: float = Field(default=300.0, ge=0)

    def wait(self, attempt: int, retry_after: float | None, rng: random.Random) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        backoff = rng.uniform(0, min(self.max_wait, self.initial_wait * 2 ** (attempt - 1)))
        if retry_after is not None:
            return max(backoff, min(retry_after, self.max_retry_after))
        return backoff


async def call_with_retry(
    fn: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    *,
    on_retry: Callable[[ProviderError, int, float], None] | None = None,
    rng: random.Random | None = None,
) -> tuple[T, int]:
    """Call ``fn`` until it succeeds, fails for good, or runs out of attempts; return its result and the attempts.

    A non-retryable :class:`ProviderError` is raised at once; a retryable one is raised after the last attempt with
    ``attempts`` set on it.
    """
    rng = rng or random.Random()
    attempt = 1
    while True:
        try:
            return await fn(), attempt
        except ProviderError as exc:
            exc.attempts = attempt
            if not exc.retryable or attempt >= policy.max_attempts:
                raise
            delay = policy.wait(attempt, exc.retry_after, rng)
            if on_retry is not None:
                on_retry(exc, attempt, delay)
            await anyio.sleep(delay)
            attempt += 1
