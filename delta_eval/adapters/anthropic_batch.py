"""Anthropic's Message Batches API for ``anthropic:`` models (see :mod:`delta_eval.adapters.batch` for how a run
uses it).

Wire format, as Anthropic documents it: a batch is created with its requests in the body
(``POST /v1/messages/batches``, ``{"requests": [{"custom_id": <cache key>, "params": <the body an interactive
call would send>}]}``), retrieved (``GET /v1/messages/batches/{id}``) until its ``processing_status`` is
``ended``, and its results read from ``results_url`` as JSONL, a line per request in no particular order:
``{"custom_id", "result": {"type": "succeeded", "message": <a Message>}}``, or ``errored`` (with the error the
interactive call would have returned), ``canceled`` or ``expired``. There is no upload: :meth:`AnthropicBatches.upload`
holds the requests until :meth:`AnthropicBatches.create` sends them (``stores_input`` is false).

Example::

    backend = AnthropicBatches(adapter)       # adapter: the model's AnthropicAdapter
    batch_id = await backend.create(await backend.upload([(key, request)]))
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeVar

import anthropic
from anthropic.types.messages import MessageBatchIndividualResponse

from delta_eval.adapters.batch import Ended, HeldRequests, Outcome
from delta_eval.adapters.errors import sdk_errors, status_error
from delta_eval.calls import ModelRequest, ModelResponse
from delta_eval.exceptions import ProviderError, TransientError

__all__ = ["AnthropicBatches", "MessagesAdapter"]

T = TypeVar("T")

#: The HTTP status each of Anthropic's error types comes with (an errored result carries the type alone).
_STATUS = {"invalid_request_error": 400, "authentication_error": 401, "permission_error": 403,
           "not_found_error": 404, "request_too_large": 413, "rate_limit_error": 429, "api_error": 500,
           "overloaded_error": 529}  # fmt: skip


class MessagesAdapter(Protocol):
    """What a batch needs of the Messages adapter (:class:`~.anthropic.AnthropicAdapter`, which builds this backend:
    named here by its parts so that neither module imports the other)."""

    model: str
    client: anthropic.AsyncAnthropic

    @property
    def options(self) -> _Secrets: ...
    def encode(self, request: ModelRequest) -> dict[str, Any]: ...
    def decode(self, message: Any, *, request_id: str | None, ttft_ms: float | None = None) -> ModelResponse: ...
    def _error(self, exc: anthropic.AnthropicError) -> ProviderError: ...


class _Secrets(Protocol):
    def secrets(self) -> list[str]: ...


class AnthropicBatches:
    """The Message Batches API of one ``anthropic:`` model, through the ``anthropic`` SDK of its adapter."""

    #: The requests travel in the create call: there is no input file to find a batch by.
    stores_input = False
    finds_created = False

    def __init__(self, adapter: MessagesAdapter) -> None:
        self.adapter = adapter
        self._held = HeldRequests[dict[str, Any]]()

    async def _sdk(self, call: Callable[[], Awaitable[T]]) -> T:
        a = self.adapter
        with sdk_errors(anthropic.AnthropicError, a._error, model=a.model, secrets=a.options.secrets):
            return await call()

    async def upload(self, items: Sequence[tuple[str, ModelRequest]]) -> str:
        """Hold the batch's requests (custom id: the cache key) until :meth:`create`; what names them."""
        requests = [{"custom_id": key, "params": self.adapter.encode(request)} for key, request in items]
        return self._held.hold([key for key, _ in items], requests)

    async def create(self, file: str) -> str:
        """Create the batch of held requests ``file``; its id."""
        requests = self._held.get(file, model=self.adapter.model)
        batch = await self._sdk(lambda: self.adapter.client.messages.batches.create(requests=requests))  # type: ignore[arg-type]
        self._held.take(file, model=self.adapter.model)  # kept until the batch exists: a failed create is retried
        return batch.id

    async def find(self, file: str) -> str | None:
        """Never found: a Message Batch does not say what it was created from."""
        return None

    async def poll(self, batch: str) -> Ended | None:
        """``None`` while the batch runs; once it has ended, every request's outcome."""
        client = self.adapter.client
        state = await self._sdk(lambda: client.messages.batches.retrieve(batch))
        if state.processing_status != "ended":
            return None

        async def read() -> dict[str, Outcome]:
            outcomes: dict[str, Outcome] = {}
            async for line in await client.messages.batches.results(batch):
                outcomes[line.custom_id] = self._outcome(batch, line)
            return outcomes

        return Ended(await self._sdk(read))

    def _outcome(self, batch: str, line: MessageBatchIndividualResponse) -> Outcome:
        model = self.adapter.model
        result = line.result
        if result.type == "succeeded":
            try:
                decoded = self.adapter.decode(result.message, request_id=None)
            except ProviderError as exc:
                return exc
            return decoded.model_copy(update={"batch": True})
        if result.type == "errored":
            error = result.error.error
            status = _STATUS.get(error.type, 500)
            return status_error(
                status, error.message, model=model, code=error.type, secrets=self.adapter.options.secrets()
            )
        # canceled or expired: never attempted, worth asking again
        return TransientError(f"the batch {batch} {result.type} before this request was done", model=model)
