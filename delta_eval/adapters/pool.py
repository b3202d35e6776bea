"""The models of one run: every adapter behind one :class:`~delta_eval.adapters.client.ModelClient`, built once.

Both sides of the comparison and the judges take their clients from the same pool, so they share one response
cache, one limiter per model id (a provider's limits apply to the model, whichever caller uses it) and one retry
policy; the pool closes every adapter when the run ends.

In a run that batches (``batch``), the clients asked for with ``batch=True`` (the judges', and the sides' with
``batch.replays``) send their calls through the provider's batch API once :meth:`ModelPool.use_batches` gives the
run's journal of batches; they are kept apart from the interactive clients of the same model (a side replaying on
the judge's model without ``batch.replays`` still calls it at once). A model whose provider has no batch API is
called at once, and the run's notes say so.

Example::

    async with ModelPool(cache, RetryPolicy()) as pool:
        client = pool.client("openai:gpt-4.1-mini", {"api_key_env": "OPENAI_API_KEY"})
        result = await client.generate(request, namespace="judge:c1#0")
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

import anyio

from delta_eval.adapters.base import ModelAdapter
from delta_eval.adapters.batch import BatchJournal, BatchQueue, BatchSettings
from delta_eval.adapters.client import ModelClient, ResponseCache
from delta_eval.adapters.limits import Limiter, ModelLimiter, ModelLimits
from delta_eval.adapters.registry import AdapterContext, create_adapter
from delta_eval.adapters.retry import RetryPolicy
from delta_eval.calls import CallStats

__all__ = ["LimiterFactory", "ModelPool"]

#: Makes the limiter of a model id from its limits, the adapter's defaults filled in (default: a
#: :class:`~delta_eval.adapters.limits.ModelLimiter` in this process).
LimiterFactory = Callable[[str, ModelLimits], Limiter]


def local_limiter(model: str, limits: ModelLimits) -> Limiter:
    """A limiter of ``model`` in this process."""
    assert limits.max_concurrency is not None
    return ModelLimiter(limits.max_concurrency, limits.requests_per_minute, adaptive=limits.adaptive)


class ModelPool:
    """Clients for every model a run calls, with a shared cache, limiters and retry policy.

    ``context`` is what adapters get besides their options (see
    :class:`~delta_eval.adapters.registry.AdapterContext`); ``limiters`` makes each model's limiter (a run sharded
    over processes holds one per model for all of them).
    """

    def __init__(
        self,
        cache: ResponseCache | None = None,
        retry: RetryPolicy | None = None,
        context: AdapterContext | None = None,
        batch: BatchSettings | None = None,
        limiters: LimiterFactory = local_limiter,
    ) -> None:
        self.cache = cache
        self.retry = retry or RetryPolicy()
        self.context = context or AdapterContext()
        self.batch = batch
        self._clients: list[tuple[str, dict[str, Any], ModelClient]] = []
        self._batched: list[ModelClient] = []
        self._names: dict[str, ModelClient] = {}
        self._limiters: dict[str, Limiter] = {}
        self._limits: dict[str, ModelLimits] = {}
        self._make_limiter = limiters
        self.on_send: Callable[[], None] | None = None

    def client(
        self,
        model: str,
        options: Mapping[str, Any] | None = None,
        limits: ModelLimits | None = None,
        *,
        label: str = "",
        batch: bool = False,
    ) -> ModelClient:
        """The client of ``model`` built with provider ``options``; the same one for the same model and options.

        ``limits`` apply to the model id from its first client on. ``label`` (e.g. the side or judge using it)
        names the client in :meth:`stats` when one model id is used with different options. ``batch``: its calls
        need no answer at once, and go through the provider's batch API when the pool batches.
        """
        opts = dict(options or {})
        batched = batch and self.batch is not None
        for existing_model, existing_options, existing in self._clients:
            if existing_model == model and existing_options == opts and (existing in self._batched) == batched:
                return existing
        adapter = create_adapter(model, opts, self.context)
        if model not in self._limiters:
            limits = limits or ModelLimits()
            resolved = ModelLimits(
                max_concurrency=limits.max_concurrency or adapter.max_concurrency,
                requests_per_minute=limits.requests_per_minute or adapter.requests_per_minute,
                adaptive=limits.adaptive,
            )
            self._limiters[model] = self._make_limiter(model, resolved)
            self._limits[model] = resolved
        client = ModelClient(adapter, self._limiters[model], self.retry, self.cache, on_send=self.on_send)
        name = model if model not in self._names else f"{model} ({label or len(self._clients)})"
        self._names[name] = client
        self._clients.append((model, opts, client))
        if batched:
            self._batched.append(client)
        return client

    def limits(self) -> dict[str, ModelLimits]:
        """Each model id's limits, the adapter's defaults filled in, for the models built so far."""
        return dict(self._limits)

    def use_batches(self, journal: BatchJournal) -> None:
        """Send the calls of every batching client through its provider's batch API from now on, its batches kept
        in ``journal`` (the pool must have been built with ``batch`` settings)."""
        assert self.batch is not None, "a pool built without batch settings"
        for client in self._batched:
            backend = client.adapter.batch_backend()
            if backend is None:
                client.adapter.note("its provider has no batch API wired in: its calls are made one by one")
                continue
            client.batch = BatchQueue(
                backend, self.batch, journal, client.model, keep=client.keep, on_send=client.sent, retry=self.retry
            )

    def use_cache(self, cache: ResponseCache | None) -> None:
        """Answer every client's calls from ``cache`` from now on (clients may be built before the cache opens)."""
        self.cache = cache
        for _, _, client in self._clients:
            client.cache = cache

    def use_journal(self, on_send: Callable[[], None] | None) -> None:
        """Call ``on_send`` as every client sends an attempt, from now on (see :mod:`delta_eval.store.sent`)."""
        self.on_send = on_send
        for _, _, client in self._clients:
            client.on_send = on_send

    @property
    def adapters(self) -> list[ModelAdapter]:
        """Every adapter built so far."""
        return [client.adapter for _, _, client in self._clients]

    def notes(self) -> list[str]:
        """What the adapters said once about their calls, each prefixed with its model."""
        said = [f"{client.model}: {text}" for _, _, client in self._clients for text in client.adapter.notes]
        for model, batches in self.batches().items():
            if batches["created"] or batches["resumed"]:
                said.append(f"{model}: {len(batches['created'])} batch(es) sent through the provider's batch API, "
                            f"{len(batches['resumed'])} of an earlier session polled again")  # fmt: skip
        for client in self._batched:
            if client.batch is not None and client.batch.resent:
                said.append(f"{client.model}: {client.batch.resent} request(s) sent again in a new batch after a "
                            "create call that did not return (a kill, a timeout, a 5xx): the provider cannot be asked "
                            "whether it created that batch, and if it did they are paid twice")  # fmt: skip
        return said

    def batches(self) -> dict[str, dict[str, list[str]]]:
        """The provider batches of each batching client: ``created`` this session, ``resumed`` from an earlier one."""
        return {
            client.model: {"created": list(client.batch.created), "resumed": list(client.batch.resumed)}
            for client in self._batched
            if client.batch is not None
        }

    def stats(self) -> dict[str, CallStats]:
        """Call counters per client, by model id (with a label where one model has several clients)."""
        return {name: client.stats for name, client in self._names.items()}

    async def aclose(self) -> None:
        """Close every adapter, even when the run is being cancelled."""
        with anyio.CancelScope(shield=True):
            for adapter in self.adapters:
                await adapter.aclose()
            for limiter in self._limiters.values():
                await limiter.aclose()

    async def __aenter__(self) -> ModelPool:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
