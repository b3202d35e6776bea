"""OpenAI's Batch API for ``openai:`` models (see :mod:`delta_eval.adapters.batch` for how a run uses it).

Wire format, as OpenAI documents it: the requests are uploaded as one JSONL file (``POST /v1/files``,
``purpose=batch``), a line each: ``{"custom_id": <cache key>, "method": "POST", "url": "/v1/chat/completions",
"body": <the body an interactive call would send>}``; the batch is created from it (``POST /v1/batches``,
``completion_window="24h"``) and retrieved (``GET /v1/batches/{id}``) until its status is ``completed``,
``failed``, ``expired`` or ``cancelled``. Results are lines of the output file (requests answered with 200) and of
the error file (the others), matched to requests by ``custom_id`` and in no particular order; a line's
``response.body`` is what the interactive call would have returned, read by the Chat Completions adapter. A batch
that ended before all its requests were done (expired, cancelled) still returns those that were; the rest fail as
retryable. A batch whose input failed validation fails all its requests, with OpenAI's reasons.

Example::

    backend = OpenAIBatches(adapter)          # adapter: the model's ChatCompletionsAdapter
    batch_id = await backend.create(await backend.upload([(key, request)]))
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal, Protocol, TypeVar

import openai
from openai.types import Batch
from openai.types.chat import ChatCompletion

from delta_eval.adapters.base import json_body
from delta_eval.adapters.batch import Ended, Outcome
from delta_eval.adapters.errors import sdk_errors, status_error
from delta_eval.adapters.openai_common import OpenAIOptions, map_openai_error
from delta_eval.calls import ModelRequest, ModelResponse
from delta_eval.exceptions import BadRequestError, ProviderError, TransientError

__all__ = ["ChatAdapter", "OpenAIBatches"]

T = TypeVar("T")

_ENDPOINT: Literal["/v1/chat/completions"] = "/v1/chat/completions"
_RUNNING = frozenset({"validating", "in_progress", "finalizing", "cancelling"})
#: How many of the organisation's latest batches are searched for one created from an upload (after a kill).
_FIND_AMONG = 500


class ChatAdapter(Protocol):
    """What a batch needs of the Chat Completions adapter (:class:`~.openai_chat.ChatCompletionsAdapter`, which
    builds this backend: named here by its parts so that neither module imports the other)."""

    model: str
    options: OpenAIOptions
    client: openai.AsyncOpenAI

    def encode(self, request: ModelRequest) -> dict[str, Any]: ...
    def decode(self, completion: ChatCompletion, *, request_id: str | None) -> ModelResponse: ...


class OpenAIBatches:
    """The Batch API of one ``openai:`` model, through the ``openai`` SDK of its adapter."""

    #: The input is a file at OpenAI, which a batch is created from (and found by, after a kill).
    stores_input = True
    finds_created = True

    def __init__(self, adapter: ChatAdapter) -> None:
        self.adapter = adapter

    @property
    def _client(self) -> openai.AsyncOpenAI:
        return self.adapter.client

    async def _sdk(self, call: Callable[[], Awaitable[T]]) -> T:
        """``call``'s result, its failures mapped as every call's are (a lost connection is worth another try)."""
        a = self.adapter
        mapped = lambda exc: map_openai_error(exc, model=a.model, secrets=a.options.secrets())  # noqa: E731
        with sdk_errors(openai.OpenAIError, mapped, model=a.model, secrets=a.options.secrets):
            return await call()

    async def upload(self, items: Sequence[tuple[str, ModelRequest]]) -> str:
        """Upload the batch's input file; its file id."""
        lines = b"".join(
            json_body({"custom_id": key, "method": "POST", "url": _ENDPOINT, "body": self.adapter.encode(request)})
            + b"\n"
            for key, request in items
        )
        uploaded = await self._sdk(
            lambda: self._client.files.create(file=("delta-eval-batch.jsonl", lines), purpose="batch")
        )
        return uploaded.id

    async def create(self, file: str) -> str:
        """Create the batch of an uploaded input file; its id."""
        batch = await self._sdk(
            lambda: self._client.batches.create(
                input_file_id=file,
                endpoint=_ENDPOINT,
                completion_window="24h",
                metadata={"created_by": "delta-eval"},
            )
        )
        return batch.id

    async def find(self, file: str) -> str | None:
        """The batch created from ``file`` among the organisation's latest, if any."""

        async def search() -> str | None:
            seen = 0
            async for batch in self._client.batches.list(limit=100):
                if batch.input_file_id == file:
                    return batch.id
                seen += 1
                if seen >= _FIND_AMONG:
                    break
            return None

        return await self._sdk(search)

    async def poll(self, batch: str) -> Ended | None:
        """``None`` while the batch runs; once it has ended, every request's outcome."""
        state = await self._sdk(lambda: self._client.batches.retrieve(batch))
        if state.status in _RUNNING:
            return None
        outcomes: dict[str, Outcome] = {}
        for file_id in (state.output_file_id, state.error_file_id):
            if file_id:
                content = await self._sdk(lambda fid=file_id: self._client.files.content(fid))  # type: ignore[misc]
                for raw in content.text.splitlines():
                    if raw.strip():
                        line = json.loads(raw)
                        outcomes[str(line.get("custom_id"))] = self._outcome(line)
        return Ended(outcomes, rest=self._unfinished(state))

    def _outcome(self, line: Mapping[str, Any]) -> Outcome:
        model = self.adapter.model
        response = line.get("response") or {}
        if line.get("error") or not response:
            error = line.get("error") or {}
            return TransientError(f"batch request failed: {error.get('code')}: {error.get('message')}", model=model)
        status, body = int(response.get("status_code") or 0), response.get("body") or {}
        if status != 200:
            detail = body.get("error") if isinstance(body, dict) else None
            detail = detail if isinstance(detail, dict) else {}
            message = str(detail.get("message") or f"status {status}")
            code = str(detail.get("code") or detail.get("type") or "") or None
            return status_error(status, message, model=model, code=code, secrets=self.adapter.options.secrets())
        try:
            decoded = self.adapter.decode(ChatCompletion.model_validate(body), request_id=response.get("request_id"))
        except ProviderError as exc:
            return exc
        return decoded.model_copy(update={"batch": True})

    def _unfinished(self, state: Batch) -> ProviderError | None:
        """The error of every request the ended batch returned nothing for."""
        model = self.adapter.model
        if state.status == "failed":
            reasons = "; ".join(
                f"line {e.line}: {e.message}" if e.line else str(e.message)
                for e in (state.errors.data or [] if state.errors else [])
            )
            return BadRequestError(f"the batch {state.id} failed validation: {reasons or 'no reason given'}",
                                   model=model)  # fmt: skip
        if state.status in ("expired", "cancelled"):
            return TransientError(f"the batch {state.id} {state.status} before this request was done", model=model)
        return None
