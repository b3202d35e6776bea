"""The Gemini API's batch mode for the fake Gemini server, at its real paths.

Endpoints (under ``/v1/``, ``/v1beta/`` or ``/v1alpha/``): ``POST models/{model}:batchGenerateContent``,
``GET batches/{id}``, ``GET batches`` (newest first, paged with ``pageSize`` and ``pageToken``),
``POST batches/{id}:cancel`` and ``DELETE batches/{id}``.

As Google documents them (ai.google.dev/gemini-api/docs/batch-mode and the ``batches`` REST reference): a batch is
created from ``{"batch": {"displayName", "inputConfig": {...}}}`` whose input config holds exactly one source:
``requests.requests`` (inline ``{"request": <GenerateContentRequest>, "metadata": {...}}``, at most 20 MB in
all; this server takes only these) or ``fileName``, else the call is refused with a 400 ``INVALID_ARGUMENT``.
Both create and get answer a long-running operation named ``batches/{id}`` whose ``metadata`` is the batch
(``model``, ``displayName``, ``state``, ``batchStats``, and, once it succeeded,
``output.inlinedResponses.inlinedResponses``, in request order, each the request's ``metadata`` with its
``response`` or its ``error`` as a ``google.rpc.Status``). States go ``BATCH_STATE_PENDING`` ->
``BATCH_STATE_RUNNING`` -> ``BATCH_STATE_SUCCEEDED`` (or ``_CANCELLED`` after a cancel, ``_EXPIRED`` after 48
hours). Each request is answered as ``generateContent`` on the batch's model answers it (the fake's rules:
:mod:`.gemini`, :mod:`.model_rules`), a refused request being an ``error`` of its own. Here each get moves a batch
one step, :attr:`GeminiBatchAPI.hold` keeps batches running, :attr:`GeminiBatchAPI.fail_request` makes chosen
requests fail with ``INTERNAL`` (partial results) and :meth:`GeminiBatchAPI.expire` ends a batch ``EXPIRED``.

Example:
    >>> from google import genai
    >>> from google.genai import types
    >>> import anyio
    >>> from delta_eval.testing.servers.gemini import FakeGeminiServer
    >>> from delta_eval.schema import Message
    >>> async def batch(server: FakeGeminiServer) -> str | None:
    ...     client = genai.Client(api_key="k", http_options=types.HttpOptions(base_url=server.url))
    ...     try:
    ...         job = await client.aio.batches.create(model="gemini-2.5-flash",
    ...                                               src=[{"contents": "hi", "metadata": {"key": "a"}}])
    ...         while job.state.value not in ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED"):
    ...             job = await client.aio.batches.get(name=job.name)
    ...         return job.dest.inlined_responses[0].response.text
    ...     finally:
    ...         await client.aio.aclose()
    >>> with FakeGeminiServer(respond=lambda request: Message(role="assistant", content="hello")) as server:
    ...     anyio.run(batch, server)
    'hello'
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from delta_eval.testing.servers.http import JSONReply, Reply, Request, while_set

__all__ = ["FakeGeminiBatch", "GeminiBatchAPI"]

_CREATE = re.compile(r"^/(?P<version>v1|v1beta|v1alpha)/models/(?P<model>[^:/]+):batchGenerateContent$")
_BATCHES = re.compile(r"^/(?P<version>v1|v1beta|v1alpha)/batches$")
_BATCH = re.compile(r"^/(?P<version>v1|v1beta|v1alpha)/batches/(?P<id>[^/:]+)(?P<cancel>:cancel)?$")
#: Inline requests of one batch, in all (Google: "the total request size should be less than 20MB").
MAX_INLINE_BYTES = 20 * 1024 * 1024
_TYPE = "type.googleapis.com/google.ai.generativelanguage.v1main.GenerateContentBatch"
_OUTPUT_TYPE = "type.googleapis.com/google.ai.generativelanguage.v1main.GenerateContentBatchOutput"
#: ``google.rpc.Code`` of an HTTP status.
_RPC = {400: 3, 401: 16, 403: 7, 404: 5, 409: 10, 429: 8, 500: 13, 503: 14, 504: 4}
_ENDED = frozenset({"BATCH_STATE_SUCCEEDED", "BATCH_STATE_FAILED", "BATCH_STATE_CANCELLED", "BATCH_STATE_EXPIRED"})
_TIME = "2026-01-01T00:00:00Z"

#: Answers one request as ``generateContent`` would (the server's own flow).
Answerer = Callable[[Request], Awaitable[Reply]]
#: The error replies of the server, in Google's shape: ``(status, kind, message)``.
ErrorReply = Callable[[int, str, str], JSONReply]


@dataclass
class FakeGeminiBatch:
    """One batch and where it stands."""

    id: str
    version: str
    model: str
    display_name: str
    requests: list[dict[str, Any]]
    headers: dict[str, str]
    state: str = "BATCH_STATE_PENDING"
    answers: list[dict[str, Any]] = field(default_factory=list)
    #: How many times a client read it.
    retrieved: int = 0

    @property
    def name(self) -> str:
        """``batches/{id}``."""
        return f"batches/{self.id}"

    def describe(self) -> dict[str, Any]:
        """The long-running operation of the batch, the batch as its ``metadata``."""
        failed = sum(1 for a in self.answers if "error" in a)
        ended = self.state in _ENDED
        stats = {"requestCount": str(len(self.requests)),
                 "successfulRequestCount": str(len(self.answers) - failed), "failedRequestCount": str(failed),
                 "pendingRequestCount": str(0 if ended else len(self.requests))}  # fmt: skip
        batch: dict[str, Any] = {"@type": _TYPE, "model": f"models/{self.model}", "displayName": self.display_name,
                                 "createTime": _TIME, "updateTime": _TIME, "batchStats": stats, "state": self.state,
                                 "name": self.name}  # fmt: skip
        operation: dict[str, Any] = {"name": self.name, "metadata": batch}
        if ended:
            batch["endTime"] = _TIME
            operation["done"] = True
            if self.answers:
                output = {"inlinedResponses": {"inlinedResponses": self.answers}}
                batch["output"] = output
                operation["response"] = {"@type": _OUTPUT_TYPE, **output}
        return operation


class GeminiBatchAPI:
    """The batch endpoints of one fake Gemini server.

    - ``stall_create``: while true, a create call makes its batch and then does not answer (a client killed
      meanwhile never heard of the batch);
    - ``hold``: while true, batches stay ``BATCH_STATE_RUNNING`` however often they are read;
    - ``fail_request``: an inline request (``{"request", "metadata"}``) for which this returns true fails with
      ``INTERNAL``.
    """

    def __init__(self, answer: Answerer, error: ErrorReply) -> None:
        self._answer = answer
        self._error = error
        self.batches: dict[str, FakeGeminiBatch] = {}
        self.hold = False
        self.stall_create = False
        self.fail_request: Callable[[dict[str, Any]], bool] | None = None
        self._ids = itertools.count(1)

    def matches(self, path: str) -> bool:
        """Whether ``path`` is one of these endpoints."""
        return any(p.match(path) for p in (_CREATE, _BATCHES, _BATCH))

    async def handle(self, request: Request) -> Reply:
        """The reply to a batch request."""
        found = _CREATE.match(request.path) or _BATCHES.match(request.path) or _BATCH.match(request.path)
        assert found is not None
        if _CREATE.match(request.path) and request.method == "POST":
            created = self._create(request, found.group("model"), found.group("version"))
            await while_set(lambda: self.stall_create)
            return created
        if _BATCHES.match(request.path) and request.method == "GET":
            return self._list(request)
        if _BATCH.match(request.path):
            batch = self.batches.get(found.group("id"))
            if batch is None:
                return self._error(404, "not_found", f"Batch batches/{found.group('id')} not found.")
            if found.group("cancel") and request.method == "POST":
                if batch.state not in _ENDED:
                    batch.state = "BATCH_STATE_CANCELLED"
                return JSONReply({})
            if request.method == "GET":
                batch.retrieved += 1
                await self._advance(batch)
                return JSONReply(batch.describe())
            if request.method == "DELETE":
                del self.batches[batch.id]
                return JSONReply({})
        return self._error(404, "not_found", f"no endpoint {request.method} {request.path}")

    def _create(self, request: Request, model: str, version: str) -> JSONReply:
        body = request.json() or {}
        batch = body.get("batch")
        if not isinstance(batch, dict):
            return self._error(400, "bad_request", "Invalid JSON payload: 'batch' is required.")
        source = batch.get("inputConfig") or batch.get("input_config") or {}
        inline = (source.get("requests") or {}).get("requests") if isinstance(source.get("requests"), dict) else None
        given = [k for k in ("requests", "fileName", "file_name") if source.get(k) is not None]
        if len(given) != 1:
            return self._error(400, "bad_request", "inputConfig: exactly one of 'requests' or 'fileName' is required.")
        if source.get("fileName") or source.get("file_name"):
            return self._error(400, "bad_request", "this fake server takes inline requests only")
        if not isinstance(inline, list) or not inline:
            return self._error(400, "bad_request", "inputConfig.requests.requests: at least one request is required.")
        if len(request.body) > MAX_INLINE_BYTES:
            return self._error(400, "bad_request", "The inline requests of a batch must be less than 20MB in total.")
        for n, item in enumerate(inline):
            if not isinstance(item, dict) or not isinstance(item.get("request"), dict):
                return self._error(400, "bad_request", f"inputConfig.requests.requests[{n}].request is required.")
        kept = {k: v for k, v in request.headers.items() if k.startswith("x-goog-") or k == "content-type"}
        display = str(batch.get("displayName") or batch.get("display_name") or "")
        created = FakeGeminiBatch(f"fake{next(self._ids):06d}", version, model, display, inline, kept)
        self.batches[created.id] = created
        return JSONReply(created.describe())

    def _list(self, request: Request) -> JSONReply:
        newest_first = list(reversed(self.batches.values()))
        start = int(request.query.get("pageToken") or 0)
        size = max(1, min(1000, int(request.query.get("pageSize") or 50)))
        page = newest_first[start : start + size]
        reply: dict[str, Any] = {"operations": [b.describe() for b in page]}
        if start + size < len(newest_first):
            reply["nextPageToken"] = str(start + size)
        return JSONReply(reply)

    def expire(self, batch_id: str) -> None:
        """End batch ``batch_id`` now, unanswered (48 hours passed)."""
        self.batches[batch_id].state = "BATCH_STATE_EXPIRED"

    async def _advance(self, batch: FakeGeminiBatch) -> None:
        """One step of the batch's life, as a client polling it would see the real service move."""
        if batch.state == "BATCH_STATE_PENDING":
            batch.state = "BATCH_STATE_RUNNING"
        elif batch.state == "BATCH_STATE_RUNNING" and not self.hold:
            batch.answers = [await self._run(batch, item) for item in batch.requests]
            batch.state = "BATCH_STATE_SUCCEEDED"

    async def _run(self, batch: FakeGeminiBatch, item: dict[str, Any]) -> dict[str, Any]:
        """One request answered as ``generateContent`` on the batch's model would answer it."""
        answer: dict[str, Any] = {"metadata": item["metadata"]} if item.get("metadata") is not None else {}
        if self.fail_request is not None and self.fail_request(item):
            return {**answer, "error": {"code": 13, "message": "Internal error encountered."}}
        path = f"/{batch.version}/models/{batch.model}:generateContent"
        reply = await self._answer(Request("POST", path, {}, dict(batch.headers), json.dumps(item["request"]).encode()))
        assert isinstance(reply, JSONReply)  # generateContent never streams
        if reply.status == 200:
            return {**answer, "response": reply.body}
        error = (reply.body or {}).get("error") or {}
        status = {"code": _RPC.get(reply.status, 2), "message": str(error.get("message") or reply.status)}
        return {**answer, "error": status}
