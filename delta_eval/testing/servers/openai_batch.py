"""OpenAI's Files and Batch APIs for the fake OpenAI server, at their real paths.

Endpoints: ``POST /v1/files`` (a multipart upload, ``purpose=batch``), ``GET /v1/files/{id}`` and
``GET /v1/files/{id}/content``; ``POST /v1/batches``, ``GET /v1/batches`` (newest first, paged with ``after`` and
``limit``), ``GET /v1/batches/{id}`` and ``POST /v1/batches/{id}/cancel``.

As OpenAI documents them: a batch is created from an uploaded JSONL file whose every line is
``{"custom_id", "method": "POST", "url", "body"}``, with ``completion_window="24h"``; a file whose lines repeat a
``custom_id``, name another endpoint or another model than the first line, or are not JSON fails validation and the
batch goes to ``failed`` with the reasons in ``errors``. A valid batch moves ``validating`` -> ``in_progress`` ->
``finalizing`` -> ``completed``; here each retrieve moves it one step, so a poller sees every status, and a test can
hold batches ``in_progress`` (:attr:`BatchAPI.hold`) to kill a run while it polls. Each line is answered exactly as
``POST /v1/chat/completions`` answers it (the simulated model, its behaviours, the same 400s); a line answered with
200 goes to the output file, any other to the error file, each as ``{"id", "custom_id", "response": {"status_code",
"request_id", "body"}, "error": null}`` in no particular order. :attr:`BatchAPI.fail_line` makes chosen lines fail
with a 500, to test partial results.

Example:
    >>> import openai, anyio
    >>> from delta_eval.testing.servers.openai import FakeOpenAIServer
    >>> from delta_eval.schema import Message
    >>> line = {"custom_id": "a", "method": "POST", "url": "/v1/chat/completions",
    ...         "body": {"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": "hi"}]}}
    >>> async def batch(server: FakeOpenAIServer) -> str:
    ...     async with openai.AsyncOpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0) as client:
    ...         f = await client.files.create(file=("in.jsonl", json.dumps(line).encode()), purpose="batch")
    ...         b = await client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions",
    ...                                         completion_window="24h")
    ...         while b.status != "completed":
    ...             b = await client.batches.retrieve(b.id)
    ...         out = await client.files.content(b.output_file_id or "")
    ...         return json.loads(out.text)["response"]["body"]["choices"][0]["message"]["content"]
    >>> with FakeOpenAIServer(respond=lambda request: Message(role="assistant", content="hello")) as server:
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

from delta_eval.testing.servers.http import JSONReply, Reply, Request, StreamReply

__all__ = ["BatchAPI", "FakeBatch", "FakeFile"]

_FILES = re.compile(r"^(?:/openai)?(?:/v1)?/files$")
_FILE = re.compile(r"^(?:/openai)?(?:/v1)?/files/(?P<id>[^/]+)(?P<content>/content)?$")
_BATCHES = re.compile(r"^(?:/openai)?(?:/v1)?/batches$")
_BATCH = re.compile(r"^(?:/openai)?(?:/v1)?/batches/(?P<id>[^/]+)(?P<cancel>/cancel)?$")
#: The endpoints a batch may name that this server answers (OpenAI also takes embeddings, completions, moderations).
_ENDPOINTS = ("/v1/chat/completions", "/v1/responses")
_CREATED = 1767225600
_DAY = 24 * 3600

#: Answers one line's request as the interactive endpoint would (the server's own flow).
Answerer = Callable[[Request], Awaitable[Reply]]
#: The error replies of the server, in OpenAI's shape: ``(status, kind, message)``.
ErrorReply = Callable[[int, str, str], JSONReply]


@dataclass
class FakeFile:
    """An uploaded or generated file."""

    id: str
    filename: str
    purpose: str
    content: bytes

    def describe(self) -> dict[str, Any]:
        """The File object."""
        return {"id": self.id, "object": "file", "bytes": len(self.content), "created_at": _CREATED,
                "filename": self.filename, "purpose": self.purpose, "status": "processed",
                "expires_at": None}  # fmt: skip


@dataclass
class FakeBatch:
    """One batch and where it stands."""

    id: str
    input_file_id: str
    endpoint: str
    metadata: dict[str, str] | None
    status: str = "validating"
    total: int = 0
    completed: int = 0
    failed: int = 0
    output_file_id: str | None = None
    error_file_id: str | None = None
    errors: list[dict[str, Any]] = field(default_factory=list)
    #: How many times a client retrieved it.
    retrieved: int = 0

    def describe(self) -> dict[str, Any]:
        """The Batch object (every field OpenAI's spec marks required is present)."""
        done = self.status in ("completed", "failed", "expired", "cancelled")
        return {
            "id": self.id,
            "object": "batch",
            "endpoint": self.endpoint,
            "errors": {"object": "list", "data": self.errors} if self.errors else None,
            "input_file_id": self.input_file_id,
            "completion_window": "24h",
            "status": self.status,
            "output_file_id": self.output_file_id,
            "error_file_id": self.error_file_id,
            "created_at": _CREATED,
            "in_progress_at": _CREATED + 1 if self.status not in ("validating", "failed") else None,
            "expires_at": _CREATED + _DAY,
            "finalizing_at": _CREATED + 2 if self.status in ("finalizing", "completed") else None,
            "completed_at": _CREATED + 3 if self.status == "completed" else None,
            "failed_at": _CREATED + 1 if self.status == "failed" else None,
            "expired_at": None,
            "cancelling_at": _CREATED + 2 if self.status in ("cancelling", "cancelled") else None,
            "cancelled_at": _CREATED + 3 if self.status == "cancelled" else None,
            "request_counts": {"total": self.total, "completed": self.completed, "failed": self.failed}
            if done or self.status in ("in_progress", "finalizing")
            else {"total": 0, "completed": 0, "failed": 0},
            "metadata": self.metadata,
        }


class BatchAPI:
    """The Files and Batch endpoints of one fake OpenAI server.

    - ``hold``: while true, batches stay ``in_progress`` however often they are retrieved;
    - ``fail_line``: a line (its parsed JSON) for which this returns true fails with a 500 in the error file.
    """

    def __init__(self, answer: Answerer, error: ErrorReply) -> None:
        self._answer = answer
        self._error = error
        self.files: dict[str, FakeFile] = {}
        self.batches: dict[str, FakeBatch] = {}
        self.hold = False
        self.fail_line: Callable[[dict[str, Any]], bool] | None = None
        self._ids = itertools.count(1)

    def matches(self, path: str) -> bool:
        """Whether ``path`` is one of these endpoints."""
        return any(p.match(path) for p in (_FILES, _FILE, _BATCHES, _BATCH))

    async def handle(self, request: Request) -> Reply:
        """The reply to a Files or Batch request."""
        if _FILES.match(request.path) and request.method == "POST":
            return self._upload(request)
        if (m := _FILE.match(request.path)) and request.method == "GET":
            found = self.files.get(m.group("id"))
            if found is None:
                return self._error(404, "not_found", f"No such File object: {m.group('id')}")
            if m.group("content"):
                return StreamReply([found.content], headers={"content-type": "application/octet-stream"})
            return JSONReply(found.describe())
        if _BATCHES.match(request.path) and request.method == "POST":
            return self._create(request)
        if _BATCHES.match(request.path) and request.method == "GET":
            return self._list(request)
        if m := _BATCH.match(request.path):
            batch = self.batches.get(m.group("id"))
            if batch is None:
                return self._error(404, "not_found", f"No batch found with id '{m.group('id')}'.")
            if m.group("cancel") and request.method == "POST":
                if batch.status in ("validating", "in_progress"):
                    batch.status = "cancelled"
                return JSONReply(batch.describe())
            if request.method == "GET":
                batch.retrieved += 1
                await self._advance(batch)
                return JSONReply(batch.describe())
        return self._error(404, "not_found", f"no endpoint {request.method} {request.path}")

    # -- files ----------------------------------------------------------------------------------------------

    def _upload(self, request: Request) -> JSONReply:
        fields = _multipart(request)
        if fields is None or "file" not in fields or "purpose" not in fields:
            return self._error(400, "bad_request", "Missing required parameter: 'file' / 'purpose'.")
        filename, content = fields["file"]
        purpose = fields["purpose"][1].decode()
        if purpose not in ("batch", "fine-tune", "assistants", "vision", "user_data", "evals"):
            return self._error(400, "bad_request", f"Invalid value for 'purpose': {purpose!r}.")
        return JSONReply(self._keep(filename or "upload", purpose, content).describe())

    def _keep(self, filename: str, purpose: str, content: bytes) -> FakeFile:
        kept = FakeFile(f"file-{next(self._ids):06d}", filename, purpose, content)
        self.files[kept.id] = kept
        return kept

    # -- batches --------------------------------------------------------------------------------------------

    def _create(self, request: Request) -> JSONReply:
        body = request.json() or {}
        endpoint, window = body.get("endpoint"), body.get("completion_window")
        if endpoint not in _ENDPOINTS:
            return self._error(400, "bad_request", f"Invalid value for 'endpoint': {endpoint!r}.")
        if window != "24h":
            return self._error(400, "bad_request", "Invalid value for 'completion_window': only '24h' is supported.")
        source = self.files.get(str(body.get("input_file_id")))
        if source is None:
            return self._error(400, "bad_request", f"No such File object: {body.get('input_file_id')}")
        if source.purpose != "batch":
            return self._error(400, "bad_request", "The input file must have purpose 'batch'.")
        batch = FakeBatch(f"batch_{next(self._ids):06d}", source.id, endpoint, body.get("metadata"))
        self.batches[batch.id] = batch
        return JSONReply(batch.describe())

    def _list(self, request: Request) -> JSONReply:
        newest_first = list(reversed(self.batches.values()))
        after = request.query.get("after")
        if after is not None:
            ids = [b.id for b in newest_first]
            newest_first = newest_first[ids.index(after) + 1 :] if after in ids else []
        limit = max(1, min(100, int(request.query.get("limit") or 20)))
        page = newest_first[:limit]
        return JSONReply({"object": "list", "data": [b.describe() for b in page],
                          "first_id": page[0].id if page else None, "last_id": page[-1].id if page else None,
                          "has_more": len(newest_first) > limit})  # fmt: skip

    async def _advance(self, batch: FakeBatch) -> None:
        """One step of the batch's life, as a client polling it would see the real service move."""
        if batch.status == "validating":
            lines, errors = self._validate(self.files[batch.input_file_id].content, batch.endpoint)
            batch.errors = errors
            batch.status = "failed" if errors else "in_progress"
            batch.total = len(lines)
        elif batch.status == "in_progress" and not self.hold:
            batch.status = "finalizing"
        elif batch.status == "finalizing":
            await self._run(batch)
            batch.status = "completed"

    @staticmethod
    def _validate(content: bytes, endpoint: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        lines: list[dict[str, Any]] = []
        errors: list[dict[str, Any]] = []
        seen: set[str] = set()
        model: str | None = None

        def fail(n: int, code: str, message: str) -> None:
            errors.append({"code": code, "message": message, "param": None, "line": n})

        for n, raw in enumerate(content.decode().splitlines(), 1):
            try:
                line = json.loads(raw)
            except json.JSONDecodeError:
                fail(n, "invalid_json_line", "This line is not parseable as valid JSON.")
                continue
            if not isinstance(line, dict) or not isinstance(line.get("custom_id"), str):
                fail(n, "missing_required_parameter", "The 'custom_id' field is required.")
                continue
            if line["custom_id"] in seen:
                fail(n, "duplicate_custom_id", "The custom_id for this request is a duplicate of another request.")
            if line.get("method") != "POST":
                fail(n, "invalid_value", "The 'method' must be 'POST'.")
            if line.get("url") != endpoint:
                fail(n, "mismatched_endpoint", f"The 'url' must match the batch's endpoint {endpoint}.")
            body = line.get("body")
            if not isinstance(body, dict):
                fail(n, "missing_required_parameter", "The 'body' field is required.")
                continue
            model = model or body.get("model")
            if body.get("model") != model:
                fail(n, "mismatched_model", "Each batch file can only include requests to a single model.")
            seen.add(line["custom_id"])
            lines.append(line)
        if not lines and not errors:
            fail(0, "empty_file", "The batch input file is empty.")
        return lines, errors

    async def _run(self, batch: FakeBatch) -> None:
        """Answer every line as the interactive endpoint would, into the output and error files."""
        lines, _ = self._validate(self.files[batch.input_file_id].content, batch.endpoint)
        out: list[bytes] = []
        err: list[bytes] = []
        for n, line in enumerate(lines, 1):
            body = line["body"]
            if body.get("stream"):
                reply: Reply = self._error(400, "bad_request", "Streaming is not supported in the Batch API.")
            elif self.fail_line is not None and self.fail_line(line):
                reply = self._error(500, "server", "The server had an error while processing your request.")
            else:
                asked = Request("POST", batch.endpoint, {}, {"content-type": "application/json"},
                                json.dumps(body).encode())  # fmt: skip
                reply = await self._answer(asked)
            assert isinstance(reply, JSONReply)  # a line never streams
            result = {"id": f"batch_req_{batch.id}_{n}", "custom_id": line["custom_id"],
                      "response": {"status_code": reply.status, "request_id": reply.headers.get("x-request-id", ""),
                                   "body": reply.body}, "error": None}  # fmt: skip
            (out if reply.status == 200 else err).append(json.dumps(result).encode())
        batch.completed, batch.failed = len(out), len(err)
        if out:
            batch.output_file_id = self._keep(f"{batch.id}_output.jsonl", "batch_output", b"\n".join(out) + b"\n").id
        if err:
            batch.error_file_id = self._keep(f"{batch.id}_error.jsonl", "batch_output", b"\n".join(err) + b"\n").id


def _multipart(request: Request) -> dict[str, tuple[str | None, bytes]] | None:
    """The fields of a ``multipart/form-data`` body: name -> (filename, bytes)."""
    kind = request.headers.get("content-type", "")
    m = re.search(r'boundary="?([^";]+)"?', kind)
    if not kind.startswith("multipart/form-data") or m is None:
        return None
    fields: dict[str, tuple[str | None, bytes]] = {}
    for part in request.body.split(b"--" + m.group(1).encode())[1:]:
        if part.startswith(b"--"):
            break
        head, _, data = part.partition(b"\r\n\r\n")
        disposition = head.decode("latin-1")
        name = re.search(r'\bname="([^"]*)"', disposition)
        filename = re.search(r'\bfilename="([^"]*)"', disposition)
        if name is not None:
            fields[name.group(1)] = (filename.group(1) if filename else None, data.removesuffix(b"\r\n"))
    return fields
