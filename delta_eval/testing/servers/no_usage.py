"""Replies without token usage, as some proxies send them (a LiteLLM proxy that strips ``usage``, an
OpenAI-compatible server that ignores ``stream_options.include_usage``, a Gemini reply without ``usageMetadata``).

A fake provider server built with ``usage=False`` passes every reply through :func:`strip_usage`: the usage objects
(``usage``, ``usageMetadata``) are removed from JSON bodies and from every streamed event, and a streamed event that
carried nothing but usage (OpenAI's final ``choices: []`` chunk) is left out altogether.

Example:
    >>> reply = strip_usage(JSONReply({"id": "x", "usage": {"prompt_tokens": 3}}))
    >>> reply.body
    {'id': 'x'}
"""

from __future__ import annotations

import json
from typing import Any

from delta_eval.testing.servers.http import JSONReply, Reply, StreamReply

__all__ = ["strip_usage"]

_KEYS = ("usage", "usageMetadata")


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in _KEYS}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _event(raw: bytes) -> bytes | None:
    """One server-sent event without usage; ``None`` when usage was all it carried."""
    text = raw.decode()
    out = []
    for line in text.splitlines(keepends=True):
        if not line.startswith("data: ") or line.strip() == "data: [DONE]":
            out.append(line)
            continue
        data = json.loads(line[len("data: ") :])
        if isinstance(data, dict) and data.get("choices") == [] and "usage" in data:
            return None  # the include_usage chunk: a server that ignores the option never sends it
        out.append("data: " + json.dumps(_strip(data)) + ("\r\n" if line.endswith("\r\n") else "\n"))
    return "".join(out).encode()


def strip_usage(reply: Reply) -> Reply:
    """``reply`` without token usage (see the module's docstring); error replies pass unchanged."""
    if isinstance(reply, JSONReply):
        if reply.status < 400:
            reply.body = _strip(reply.body)
        return reply
    if isinstance(reply, StreamReply):
        reply.events = [e for e in (_event(raw) for raw in reply.events) if e is not None]
    return reply
