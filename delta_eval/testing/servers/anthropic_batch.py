"""Anthropic's Message Batches API for the fake Anthropic server, at its real paths.

Endpoints: ``POST /v1/messages/batches``, ``GET /v1/messages/batches`` (newest first, paged with ``limit``,
``before_id`` and ``after_id``), ``GET /v1/messages/batches/{id}``, ``GET /v1/messages/batches/{id}/results``
(JSONL), ``POST /v1/messages/batches/{id}/cancel`` and ``DELETE /v1/messages/batches/{id}``.

As Anthropic documents them (docs.anthropic.com, "Batch processing" and the Message Batches API reference): a batch
is created with ``{"requests": [{"custom_id", "params"}]}``, at least one and at most 100,000 requests (and 256 MB);
each ``custom_id`` matches ``^[a-zA-Z0-9_-]{1,64}$`` and is unique within its batch, else the create call is
refused with a 400. Each request's ``params`` are validated only as the batch is processed: a request the Messages
API would refuse (the fake's own rules for ``POST /v1/messages``: :mod:`.anthropic`, :mod:`.model_rules`) or that
asks to ``stream`` ends ``errored``, the others ``succeeded``. A batch is ``in_progress`` until it ``ended``
(``canceling`` between a cancel and its end); its ``request_counts`` hold every request as ``processing`` until the
whole batch ends, then as ``succeeded``, ``errored``, ``canceled`` or ``expired``; ``results_url`` is set only once
it has ended, and the results are in no particular order. Here each retrieve moves a batch one step (so a poller
sees ``in_progress``), :attr:`MessageBatchAPI.hold` keeps batches in progress (to kill a run while it polls),
:attr:`MessageBatchAPI.fail_request` makes chosen requests end ``errored`` with an ``api_error`` (partial results)
and :meth:`MessageBatchAPI.expire` ends a batch with its requests ``expired``.

Example:
    >>> import anthropic, anyio
    >>> from delta_eval.testing.servers.anthropic import FakeAnthropicServer
    >>> from delta_eval.schema import Message
    >>> request = {"custom_id": "a", "params": {"model": "claude-sonnet-4-5", "max_tokens": 50,
    ...                                          "messages": [{"role": "user", "content": "hi"}]}}
    >>> async def batch(server: FakeAnthropicServer) -> str:
    ...     async with anthropic.AsyncAnthropic(base_url=server.url, api_key="k", max_retries=0) as client:
    ...         b = await client.messages.batches.create(requests=[request])
    ...         while b.processing_status != "ended":
    ...             b = await client.messages.batches.retrieve(b.id)
    ...         [line] = [line async for line in await client.messages.batches.results(b.id)]
    ...         return line.result.message.content[0].text
    >>> with FakeAnthropicServer(respond=lambda request: Message(role="assistant", content="hello")) as server:
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

from delta_eval.testing.servers.http import JSONReply, Reply, Request, StreamReply, while_set

__all__ = ["FakeMessageBatch", "MessageBatchAPI"]

_BATCHES = re.compile(r"^(?:/v1)?/messages/batches$")
_BATCH = re.compile(r"^(?:/v1)?/messages/batches/(?P<id>[^/]+)(?P<tail>/results|/cancel)?$")
_CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
#: The most requests one batch may hold (Anthropic: 100,000 requests or 256 MB, whichever comes first).
MAX_REQUESTS = 100_000
MAX_BYTES = 256 * 1024 * 1024
_CREATED = "2026-01-01T00:00:00Z"
_ENDED = "2026-01-01T00:05:00Z"
_EXPIRES = "2026-01-02T00:00:00Z"

#: Answers one request as ``POST /v1/messages`` would (the server's own flow).
Answerer = Callable[[Request], Awaitable[Reply]]
#: The error replies of the server, in Anthropic's shape: ``(status, kind, message)``.
ErrorReply = Callable[[int, str, str], JSONReply]


@dataclass
class FakeMessageBatch:
    """One Message Batch and where it stands."""

    id: str
    requests: list[dict[str, Any]]
    headers: dict[str, str]
    processing_status: str = "in_progress"
    #: custom_id -> the result object, once the batch has ended.
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    cancel_asked: bool = False
    #: How many times a client retrieved it.
    retrieved: int = 0

    def describe(self, base_url: str) -> dict[str, Any]:
        """The MessageBatch object."""
        counts = {"processing": 0, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
        if self.processing_status == "ended":
            for result in self.results.values():
                counts[result["type"]] += 1
        else:
            counts["processing"] = len(self.requests)
        ended = self.processing_status == "ended"
        return {
            "id": self.id,
            "type": "message_batch",
            "processing_status": self.processing_status,
            "request_counts": counts,
            "created_at": _CREATED,
            "expires_at": _EXPIRES,
            "ended_at": _ENDED if ended else None,
            "archived_at": None,
            "cancel_initiated_at": _ENDED if self.cancel_asked else None,
            "results_url": f"{base_url}/v1/messages/batches/{self.id}/results" if ended else None,
        }


class MessageBatchAPI:
    """The Message Batches endpoints of one fake Anthropic server.

    - ``stall_create``: while true, a create call makes its batch and then does not answer (a client killed
      meanwhile never heard of the batch);
    - ``hold``: while true, batches stay ``in_progress`` however often they are retrieved;
    - ``fail_request``: a request (``{"custom_id", "params"}``) for which this returns true ends ``errored`` with
      an ``api_error``.
    """

    def __init__(self, answer: Answerer, error: ErrorReply, base_url: Callable[[], str]) -> None:
        self._answer = answer
        self._error = error
        self._base_url = base_url
        self.batches: dict[str, FakeMessageBatch] = {}
        self.hold = False
        self.stall_create = False
        self.fail_request: Callable[[dict[str, Any]], bool] | None = None
        self._ids = itertools.count(1)

    def matches(self, path: str) -> bool:
        """Whether ``path`` is one of these endpoints."""
        return bool(_BATCHES.match(path) or _BATCH.match(path))

    async def handle(self, request: Request) -> Reply:
        """The reply to a Message Batches request."""
        if _BATCHES.match(request.path):
            if request.method == "POST":
                created = self._create(request)
                await while_set(lambda: self.stall_create)
                return created
            if request.method == "GET":
                return self._list(request)
        elif m := _BATCH.match(request.path):
            batch = self.batches.get(m.group("id"))
            if batch is None:
                return self._error(404, "not_found", f"No message batch found with id '{m.group('id')}'.")
            tail = m.group("tail")
            if tail == "/cancel" and request.method == "POST":
                if batch.processing_status == "in_progress":
                    batch.processing_status, batch.cancel_asked = "canceling", True
                return JSONReply(batch.describe(self._base_url()))
            if tail == "/results" and request.method == "GET":
                if batch.processing_status != "ended":
                    return self._error(400, "bad_request", f"Message batch {batch.id} has not finished processing.")
                lines = [
                    json.dumps({"custom_id": k, "result": r}).encode() + b"\n"
                    for k, r in reversed(batch.results.items())
                ]
                return StreamReply(lines, headers={"content-type": "application/binary"})
            if tail is None and request.method == "GET":
                batch.retrieved += 1
                await self._advance(batch)
                return JSONReply(batch.describe(self._base_url()))
            if tail is None and request.method == "DELETE":
                if batch.processing_status != "ended":
                    return self._error(400, "bad_request", "A message batch must end before it can be deleted.")
                del self.batches[batch.id]
                return JSONReply({"id": batch.id, "type": "message_batch_deleted"})
        return self._error(404, "not_found", f"no endpoint {request.method} {request.path}")

    def _create(self, request: Request) -> JSONReply:
        body = request.json() or {}
        requests = body.get("requests")
        if not isinstance(requests, list) or not requests:
            return self._error(400, "bad_request", "requests: a batch must hold at least one request")
        if len(requests) > MAX_REQUESTS or len(request.body) > MAX_BYTES:
            return self._error(413, "request_too_large",
                               f"a batch holds at most {MAX_REQUESTS} requests and 256 MB")  # fmt: skip
        seen: set[str] = set()
        for n, item in enumerate(requests):
            custom_id = item.get("custom_id") if isinstance(item, dict) else None
            if not isinstance(custom_id, str) or not _CUSTOM_ID.match(custom_id):
                return self._error(400, "bad_request",
                                   f"requests.{n}.custom_id: String should match pattern "
                                   "'^[a-zA-Z0-9_-]{1,64}$'")  # fmt: skip
            if custom_id in seen:
                return self._error(400, "bad_request",
                                   f"requests.{n}.custom_id: duplicate custom_id {custom_id!r} in the batch; "
                                   "each request's custom_id must be unique")  # fmt: skip
            if not isinstance(item.get("params"), dict):
                return self._error(400, "bad_request", f"requests.{n}.params: Field required")
            seen.add(custom_id)
        kept = {k: v for k, v in request.headers.items() if k.startswith("anthropic-") or k == "content-type"}
        batch = FakeMessageBatch(f"msgbatch_{next(self._ids):06d}", requests, kept)
        self.batches[batch.id] = batch
        return JSONReply(batch.describe(self._base_url()))

    def _list(self, request: Request) -> JSONReply:
        newest_first = list(reversed(self.batches.values()))
        ids = [b.id for b in newest_first]
        after, before = request.query.get("after_id"), request.query.get("before_id")
        if after is not None:  # the page just older than ``after_id``
            newest_first = newest_first[ids.index(after) + 1 :] if after in ids else []
        elif before is not None:  # the page just newer than ``before_id``
            newest_first = newest_first[: ids.index(before)] if before in ids else []
        limit = max(1, min(1000, int(request.query.get("limit") or 20)))
        page = newest_first[:limit]
        return JSONReply({"data": [b.describe(self._base_url()) for b in page], "has_more": len(newest_first) > limit,
                          "first_id": page[0].id if page else None,
                          "last_id": page[-1].id if page else None})  # fmt: skip

    def expire(self, batch_id: str) -> None:
        """End batch ``batch_id`` now, its requests not yet done ``expired`` (24 hours passed)."""
        batch = self.batches[batch_id]
        batch.results = {r["custom_id"]: {"type": "expired"} for r in batch.requests}
        batch.processing_status = "ended"

    async def _advance(self, batch: FakeMessageBatch) -> None:
        """One step of the batch's life, as a client polling it would see the real service move."""
        if batch.processing_status == "canceling":
            batch.results = {r["custom_id"]: {"type": "canceled"} for r in batch.requests}
            batch.processing_status = "ended"
        elif batch.processing_status == "in_progress" and not self.hold and batch.retrieved > 1:
            for item in batch.requests:
                batch.results[item["custom_id"]] = await self._run(batch, item)
            batch.processing_status = "ended"

    async def _run(self, batch: FakeMessageBatch, item: dict[str, Any]) -> dict[str, Any]:
        """One request answered as ``POST /v1/messages`` would answer it."""
        params = item["params"]
        if params.get("stream"):
            reply: Reply = self._error(400, "bad_request", "stream: streaming is not supported in Message Batches")
        elif self.fail_request is not None and self.fail_request(item):
            reply = self._error(500, "server", "Internal server error")
        else:
            asked = Request("POST", "/v1/messages", {}, dict(batch.headers), json.dumps(params).encode())
            reply = await self._answer(asked)
        assert isinstance(reply, JSONReply)  # never a stream: ``stream`` was refused
        if reply.status == 200:
            return {"type": "succeeded", "message": reply.body}
        return {"type": "errored", "error": reply.body}
