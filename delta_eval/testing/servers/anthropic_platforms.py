"""What the fake Anthropic server does differently when it stands in for Vertex AI or Amazon Bedrock.

- Vertex AI: ``POST /v1/projects/{project}/locations/{location}/publishers/anthropic/models/{model}:rawPredict``
  (``:streamRawPredict`` for a stream, which the body's ``stream`` also says), a bearer token;
- Bedrock: ``POST /model/{modelId}/invoke`` (``/invoke-with-response-stream``; the body has no ``stream``), SigV4
  (``Authorization: AWS4-HMAC-SHA256 ...`` with ``x-amz-date``) or a Bedrock API key as a bearer token; errors as
  ``{"message": ...}`` with ``x-amzn-ErrorType``; streams as AWS event-stream frames whose ``chunk`` events carry
  each Messages event, base64-encoded.

On both, the body must carry the platform's ``anthropic_version`` and no ``model`` (the path names it), as the real
platforms answer 400 otherwise.

Example:
    >>> frame = event_frame({"type": "message_stop"})
    >>> len(frame) == int.from_bytes(frame[:4], "big")
    True
"""

from __future__ import annotations

import base64
import json
import re
import struct
import zlib
from typing import Any
from urllib.parse import unquote

from delta_eval.testing.servers.http import JSONReply, Reply, Request, StreamReply
from delta_eval.testing.servers.provider import Route

__all__ = ["VERSIONS", "as_bedrock", "authorised", "body_problem", "event_frame", "route"]

#: The ``anthropic_version`` each platform documents.
VERSIONS = {"vertex": "vertex-2023-10-16", "bedrock": "bedrock-2023-05-31"}
_VERTEX = re.compile(
    r"^/v1/projects/(?P<project>[^/]+)/locations/(?P<location>[^/]+)/publishers/anthropic/models/"
    r"(?P<model>[^:/]+):(?P<method>rawPredict|streamRawPredict)$"
)
_BEDROCK = re.compile(r"^/model/(?P<model>[^/]+)/(?P<method>invoke|invoke-with-response-stream)$")
_AWS_ERRORS = {400: "ValidationException", 401: "UnrecognizedClientException", 403: "AccessDeniedException",
               404: "ResourceNotFoundException", 429: "ThrottlingException", 500: "InternalServerException",
               529: "ServiceUnavailableException"}  # fmt: skip


def route(request: Request) -> Route | None:
    """The route of a Vertex AI or Bedrock Messages request (``api`` names the platform), else ``None``."""
    vertex = _VERTEX.match(request.path)
    if vertex is not None:
        return Route(unquote(vertex["model"]), vertex["method"] == "streamRawPredict", "vertex")
    bedrock = _BEDROCK.match(request.path)
    if bedrock is not None:
        return Route(unquote(bedrock["model"]), bedrock["method"] == "invoke-with-response-stream", "bedrock")
    return None


def authorised(request: Request, route: Route, bearer: str | None) -> bool:
    """Whether the request carries credentials: exactly ``Bearer <bearer>`` when the server was given one (a Vertex
    token, a Bedrock API key), else any ``Authorization`` (a bearer token, or on Bedrock a SigV4 signature, which
    cannot be checked without the secret key)."""
    if "authorization" not in request.headers:
        return False
    return bearer is None or request.presented("authorization", f"Bearer {bearer}")


def body_problem(request: Request, route: Route) -> str | None:
    """Why the platform would refuse the body (400), or ``None``."""
    body = request.data or {}
    if "model" in body:
        return "model: Extra inputs are not permitted (the model is named by the path)"
    expected = VERSIONS[route.api]
    if body.get("anthropic_version") != expected:
        return f"anthropic_version: expected {expected!r}, got {body.get('anthropic_version')!r}"
    if route.api == "bedrock" and "stream" in body:
        return "stream: Extra inputs are not permitted (use /invoke-with-response-stream)"
    if route.api == "vertex" and bool(body.get("stream")) != route.stream:
        return "stream must be true on :streamRawPredict and absent or false on :rawPredict"
    return None


def as_bedrock(reply: Reply) -> Reply:
    """``reply`` as Bedrock shapes it: errors as ``{"message"}`` plus ``x-amzn-ErrorType``, streams framed."""
    if isinstance(reply, StreamReply):
        reply.headers["content-type"] = "application/vnd.amazon.eventstream"
        return reply
    if reply.status < 400:
        return reply
    error = reply.body.get("error", {}) if isinstance(reply.body, dict) else {}
    kind = _AWS_ERRORS.get(reply.status, "InternalServerException")
    headers = {**reply.headers, "x-amzn-ErrorType": f"{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/"}
    return JSONReply({"message": error.get("message", "")}, status=reply.status, headers=headers,
                     delay_s=reply.delay_s)  # fmt: skip


def _header(name: str, value: str) -> bytes:
    raw_name, raw_value = name.encode(), value.encode()
    return struct.pack(">B", len(raw_name)) + raw_name + struct.pack(">BH", 7, len(raw_value)) + raw_value  # 7: string


def event_frame(event: dict[str, Any]) -> bytes:
    """One AWS event-stream message carrying a Messages stream ``event`` as Bedrock does: a ``chunk`` event whose JSON
    payload holds the event's bytes in base64. Framing: total and header lengths, a CRC32 of that prelude, the
    headers, the payload, a CRC32 of everything before it."""
    payload = json.dumps({"bytes": base64.b64encode(json.dumps(event).encode()).decode()}).encode()
    headers = (
        _header(":event-type", "chunk") + _header(":content-type", "application/json")
        + _header(":message-type", "event")
    )  # fmt: skip
    total = 12 + len(headers) + len(payload) + 4
    prelude = struct.pack(">II", total, len(headers))
    head = prelude + struct.pack(">I", zlib.crc32(prelude)) + headers + payload
    return head + struct.pack(">I", zlib.crc32(head))
