"""The Gemini API's batch mode for ``gemini:`` models (see :mod:`delta_eval.adapters.batch` for how a run uses it).

Wire format, as Google documents it (ai.google.dev/gemini-api/docs/batch-mode) and ``google-genai`` speaks it: a
batch is created with its requests inline (``POST /v1beta/models/{model}:batchGenerateContent``, ``{"batch":
{"displayName", "inputConfig": {"requests": {"requests": [{"request": <a GenerateContentRequest>, "metadata":
{"key": <cache key>}}]}}}}``) and read back (``GET /v1beta/batches/{name}``, a long-running operation whose
``metadata`` is the batch) until its state is ``BATCH_STATE_SUCCEEDED``, ``_FAILED``, ``_CANCELLED`` or
``_EXPIRED`` (the SDK calls them ``JOB_STATE_*``). Its answers are inline in ``metadata.output.inlinedResponses``,
each a ``response`` or an ``error`` (a ``google.rpc.Status``) with the request's ``metadata``. Inline requests
travel in the create call, so :meth:`GeminiBatches.upload` only holds them (``stores_input`` is false); a batch
created by a call that got no answer (a kill, a timeout) is found by its display name in the list of batches
(``GET /v1beta/batches``, newest first). Google caps an inline batch at 20 MB: a batch of ``size`` requests must
stay under it (lower ``size`` for long contexts; a batch over it is refused whole, each of its requests an error
row). Gemini's file input (the Files API, up to 2 GB) is not wired in.

Example::

    backend = GeminiBatches(adapter)          # adapter: the model's GeminiAdapter
    batch_name = await backend.create(await backend.upload([(key, request)]))
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeVar, cast

from google import genai
from google.genai import errors, types

from delta_eval.adapters.batch import Ended, HeldRequests, Outcome
from delta_eval.adapters.errors import sdk_errors, status_error
from delta_eval.calls import ModelRequest, ModelResponse
from delta_eval.exceptions import BadRequestError, ProviderError, TransientError

__all__ = ["GeminiBatches", "GenerateAdapter"]

T = TypeVar("T")

_RUNNING = frozenset({"JOB_STATE_PENDING", "JOB_STATE_QUEUED", "JOB_STATE_RUNNING", "JOB_STATE_UNSPECIFIED"})
#: The HTTP status of each ``google.rpc.Code`` an answer may fail with.
_HTTP = {3: 400, 5: 404, 7: 403, 8: 429, 9: 400, 13: 500, 14: 503, 16: 401, 4: 504}


class _Secrets(Protocol):
    def secrets(self) -> list[str]: ...


class _Clients(Protocol):
    def next(self) -> genai.Client: ...


class GenerateAdapter(Protocol):
    """What a batch needs of the Gemini adapter (:class:`~.gemini.GeminiAdapter`, which builds this backend)."""

    model: str
    wire_model: str

    @property
    def options(self) -> _Secrets: ...
    @property
    def clients(self) -> _Clients: ...
    def encode(self, request: ModelRequest) -> tuple[list[dict[str, Any]], types.GenerateContentConfig]: ...
    def decode(self, chunks: list[Any], *, ttft_ms: float | None = None) -> ModelResponse: ...
    def _error(self, exc: errors.APIError) -> ProviderError: ...


class GeminiBatches:
    """The batch mode of one ``gemini:`` model, through the ``google-genai`` SDK of its adapter."""

    #: Inline requests travel in the create call: nothing is left at Google to find a batch by.
    stores_input = False
    finds_created = True

    def __init__(self, adapter: GenerateAdapter) -> None:
        self.adapter = adapter
        self._held = HeldRequests[types.InlinedRequest]()

    async def _sdk(self, call: Callable[[], Awaitable[T]]) -> T:
        a = self.adapter
        with sdk_errors(errors.APIError, a._error, model=a.model, secrets=a.options.secrets):
            return await call()

    async def upload(self, items: Sequence[tuple[str, ModelRequest]]) -> str:
        """Hold the batch's requests (metadata ``key``: the cache key) until :meth:`create`; what names them."""
        held: list[types.InlinedRequest] = []
        for key, request in items:
            contents, config = self.adapter.encode(request)
            if config.http_options is not None:
                # Per-request HTTP options (extra body fields) have no place in a batch line.
                config = config.model_copy(update={"http_options": None})
            held.append(types.InlinedRequest(contents=cast(Any, contents), config=config, metadata={"key": key}))
        return self._held.hold([key for key, _ in items], held)

    async def create(self, file: str) -> str:
        """Create the batch of held requests ``file``; its name (``batches/...``)."""
        held = self._held.get(file, model=self.adapter.model)
        job = await self._sdk(
            lambda: self.adapter.clients.next().aio.batches.create(
                model=self.adapter.wire_model,
                src=cast(Any, held),
                config=types.CreateBatchJobConfig(display_name=f"delta-eval-{file}"),
            )
        )
        self._held.take(file, model=self.adapter.model)  # kept until the batch exists: a failed create is retried
        if not job.name:
            raise TransientError("the batch was created without a name", model=self.adapter.model)
        return job.name

    async def find(self, file: str) -> str | None:
        """The batch created from held requests ``file`` by a create call that got no answer (a kill, a timeout, a
        5xx): the newest of this model's batches named ``delta-eval-{file}`` (a name unique to that hold), if any.
        It scans the project's list of batches, newest first, to its end when there is none."""
        display = f"delta-eval-{file}"
        model = self.adapter.wire_model.removeprefix("models/")  # (the SDK takes either form)

        async def scan() -> str | None:
            pager = await self.adapter.clients.next().aio.batches.list(config=types.ListBatchJobsConfig(page_size=100))
            async for job in pager:  # newest first
                if job.display_name == display and (job.model or "").removeprefix("models/") == model and job.name:
                    return job.name
            return None

        found = await self._sdk(scan)
        if found is not None:
            self._held.discard(file)  # its batch exists: the requests are not sent again
        return found

    async def poll(self, batch: str) -> Ended | None:
        """``None`` while the batch runs; once it has ended, every request's outcome."""
        job = await self._sdk(lambda: self.adapter.clients.next().aio.batches.get(name=batch))
        state = str(getattr(job.state, "value", job.state) or "")
        if state in _RUNNING:
            return None
        outcomes: dict[str, Outcome] = {}
        for answer in (job.dest.inlined_responses or []) if job.dest else []:
            key = (answer.metadata or {}).get("key")
            if key is not None:
                outcomes[key] = self._outcome(answer)
        return Ended(outcomes, rest=self._unfinished(batch, state))

    def _outcome(self, answer: types.InlinedResponse) -> Outcome:
        model = self.adapter.model
        if answer.error is not None or answer.response is None:
            error = answer.error or types.JobError(message="no response")
            status = _HTTP.get(error.code or 13, 500)
            message = error.message or f"code {error.code}"
            return status_error(status, message, model=model, secrets=self.adapter.options.secrets())
        try:
            decoded = self.adapter.decode([answer.response])
        except ProviderError as exc:
            return exc
        return decoded.model_copy(update={"batch": True})

    def _unfinished(self, batch: str, state: str) -> ProviderError | None:
        model = self.adapter.model
        if state == "JOB_STATE_FAILED":
            return BadRequestError(f"the batch {batch} failed", model=model)
        if state in ("JOB_STATE_CANCELLED", "JOB_STATE_EXPIRED"):
            return TransientError(f"the batch {batch} ended ({state}) before this request was done", model=model)
        return None
