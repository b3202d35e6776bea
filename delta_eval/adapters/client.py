"""One model as the rest of the library sees it: an adapter behind a cache, a limiter and retries.

Order of a call: the response cache first (a hit costs nothing and skips the rate limiter), then a slot from the
model's limiter, then the adapter, retried by the policy; the provider's rate-limit headers and 429s go back to
the limiter. Successful responses are cached as soon as they arrive,
so a run killed a moment later has already kept what it paid for. Content-filtered answers are not cached.

A client given a :class:`~delta_eval.adapters.batch.BatchQueue` (``batch``) sends what the cache misses through the
provider's batch API instead: no limiter slot (the provider paces a batch itself) and no retry of a failed request
(it is the caller's error, as a failure after the last retry is).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio

from delta_eval.adapters.base import ModelAdapter
from delta_eval.adapters.batch import BatchQueue
from delta_eval.adapters.limits import Limiter
from delta_eval.adapters.ratelimit_headers import RateLimitSignal, collect_headers
from delta_eval.adapters.retry import RetryPolicy, call_with_retry
from delta_eval.calls import CallStats, ModelRequest, ModelResponse
from delta_eval.exceptions import ProviderError, RateLimitError

__all__ = ["CallResult", "ModelClient", "ResponseCache"]


class ResponseCache(Protocol):
    """Where responses are kept by request key (see :class:`delta_eval.store.cache.SQLiteCache`). A cache that sets
    ``holds_v1_keys`` holds answers keyed under cache key version 1 as well: a miss is looked up again with the old
    key (:meth:`~delta_eval.calls.ModelRequest.cache_key_v1`)."""

    def get(self, key: str) -> ModelResponse | None:
        """The cached response for ``key``, if any."""

    def put(self, key: str, model: str, response: ModelResponse) -> None:
        """Keep ``response`` under ``key``."""


@dataclass(frozen=True)
class CallResult:
    """A response and how it was obtained."""

    response: ModelResponse
    cached: bool
    attempts: int = 0


@dataclass
class _Flight:
    """A request in flight through a client: set when it ends, with its answer if it got one."""

    done: anyio.Event = field(default_factory=anyio.Event)
    answer: ModelResponse | None = None


@dataclass
class ModelClient:
    """Calls one model through cache, limiter and retry.

    Example::

        client = ModelClient(adapter, ModelLimiter(8), RetryPolicy(), cache)
        result = await client.generate(request, namespace="baseline")
    """

    adapter: ModelAdapter
    limiter: Limiter
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    cache: ResponseCache | None = None
    stats: CallStats = field(default_factory=CallStats)
    rng: random.Random = field(default_factory=random.Random)
    #: Called as each attempt is sent, before any answer (the run folder's journal of calls sent).
    on_send: Callable[[], None] | None = None
    #: Where cache misses go when the run batches this client's calls (``None``: each is made at once).
    batch: BatchQueue | None = None
    _asking: dict[str, _Flight] = field(default_factory=dict, init=False, repr=False)
    _identity: dict[str, Any] | None = field(default=None, init=False, repr=False)

    @property
    def model(self) -> str:
        """The full model id."""
        return self.adapter.model

    @property
    def identity(self) -> dict[str, Any]:
        """The adapter's :meth:`~delta_eval.adapters.base.ModelAdapter.cache_identity`, asked once: it is the
        adapter's configuration (an endpoint, a deployment), and making it anew for every call's key (an SDK's URL
        turned into text) was ~1% of a call's CPU."""
        if self._identity is None:
            self._identity = self.adapter.cache_identity()
        return self._identity

    async def generate(self, request: ModelRequest, *, namespace: str = "") -> CallResult:
        """The response to ``request``; raises :class:`ProviderError` once retries are exhausted.

        With a cache, a request already in flight through this client is not sent again: the second caller waits
        for the first's answer and takes it (both sides of a session asking the simulated user or the tool model the
        same thing at the same moment pay once). If the first fails, the next waiter sends it."""
        key = request.cache_key(namespace=namespace, identity=self.identity)
        if self.cache is None:
            return await self._fetch(key, request)
        while True:
            hit = self._cached(key, request, namespace)
            if hit is not None:
                self.stats.cached += 1
                return CallResult(hit, cached=True)
            flight = self._asking.get(key)
            if flight is None:
                break
            await flight.done.wait()
            if flight.answer is not None:  # an answer the cache does not keep (content-filtered): shared all the same
                self.stats.cached += 1
                return CallResult(flight.answer, cached=True)
        flight = self._asking[key] = _Flight()
        try:
            result = await self._fetch(key, request)
            flight.answer = result.response
            return result
        finally:
            del self._asking[key]
            flight.done.set()

    def _cached(self, key: str, request: ModelRequest, namespace: str) -> ModelResponse | None:
        assert self.cache is not None
        hit = self.cache.get(key)
        if hit is None and getattr(self.cache, "holds_v1_keys", False):
            # A cache written before key version 2: its answer, if any, is kept under the new key too.
            hit = self.cache.get(request.cache_key_v1(namespace=namespace, identity=self.identity))
            if hit is not None:
                self.cache.put(key, self.model, hit)
        return hit

    async def _fetch(self, key: str, request: ModelRequest) -> CallResult:
        """``request`` from the provider (or its batch API), cached as ``key``."""
        if self.batch is not None:
            try:
                batched = await self.batch.generate(key, request)
            except ProviderError:
                self.stats.failed += 1
                raise
            return CallResult(batched, cached=False, attempts=1)

        async def attempt() -> ModelResponse:
            async with self.limiter.slot() as ticket:
                self.stats.made += 1
                if self.on_send is not None:
                    self.on_send()
                start = time.perf_counter()
                # The adapter reports the provider's rate-limit headers (of an answer or an error) into `seen`.
                with collect_headers() as seen:
                    try:
                        response = await self.adapter.generate(request)
                    except RateLimitError as exc:
                        self.stats.rate_limited += 1
                        signal = seen[-1] if seen else RateLimitSignal(retry_after=exc.retry_after)
                        self.limiter.on_rate_limited(signal, ticket)
                        raise
                    except ProviderError:
                        self.limiter.observe(seen[-1] if seen else None, ticket)
                        raise
                self.limiter.on_success(seen[-1] if seen else None, ticket)
                elapsed = (time.perf_counter() - start) * 1000
                return response.model_copy(update={"latency_ms": elapsed})

        def count_retry(exc: ProviderError, attempt_no: int, delay: float) -> None:
            self.stats.retries += 1

        try:
            response, attempts = await call_with_retry(attempt, self.retry, on_retry=count_retry, rng=self.rng)
        except ProviderError:
            self.stats.failed += 1
            raise
        self.keep(key, response)
        return CallResult(response, cached=False, attempts=attempts)

    def keep(self, key: str, response: ModelResponse) -> None:
        """Cache an answer the provider gave for request ``key`` and count it."""
        if self.cache is not None and response.finish_reason != "content_filter":
            self.cache.put(key, self.model, response)
        # Counted once kept: the cache commits it before any record of this count (a checkpoint, a shard's
        # counters: see SQLiteCache.flush), so the next session finds in the cache the answers a killed one had not
        # recorded (see RunManifest.begin_session); a kill before the commit loses both.
        self.stats.answered += 1
        self.stats.no_usage += response.usage is None

    def sent(self, count: int) -> None:
        """Count ``count`` requests sent at once (a batch)."""
        self.stats.made += count
        if self.on_send is not None:
            for _ in range(count):
                self.on_send()
