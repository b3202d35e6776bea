"""A session's transcript as a report shows it: each step's text, tool calls with their results and where each
result came from, and the user's answers with where each came from (the recording, or the user simulator).

Example:
    >>> steps = [{"text": "Your id?", "tool_calls": [], "tool_results": [], "user": "mia", "user_source": "simulated"},
    ...          {"text": None, "tool_calls": [{"id": "1", "name": "get_user", "arguments": '{"id": "mia"}'}],
    ...           "tool_results": [{"call_id": "1", "content": "{}", "source": "llm"}]}]
    >>> [(e["kind"], e.get("source")) for e in transcript_entries(steps)]
    [('agent', None), ('user', 'simulated'), ('call', 'llm')]
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["SOURCE_LABELS", "USER_LABELS", "transcript_entries"]

#: How the report and the viewer name where a tool result of a session came from.
SOURCE_LABELS = {
    "recorded": "recorded",
    "simulated": "simulated: failure result",
    "llm": "simulated by the tool model",
    "custom": "simulated by your simulator",
}
#: How they name where a user message of a session came from.
USER_LABELS = {"recorded": "recorded user", "simulated": "simulated user"}


def transcript_entries(steps: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The entries of a transcript stored as ``replays`` steps (dicts, as DuckDB or Arrow give them), in order:
    ``agent`` (``text``), ``call`` (``name``, ``arguments``, ``result``, ``source``) and ``user`` (``text``,
    ``source``)."""
    out: list[dict[str, Any]] = []
    for step in steps:
        if step.get("text"):
            out.append({"kind": "agent", "text": step["text"]})
        results = {r.get("call_id"): r for r in step.get("tool_results") or []}
        for call in step.get("tool_calls") or []:
            got = results.get(call.get("id"))
            out.append({"kind": "call", "name": call.get("name"), "arguments": call.get("arguments"),
                        "result": got.get("content") if got else None,
                        "source": got.get("source") if got else None})  # fmt: skip
        if step.get("user") is not None:
            out.append({"kind": "user", "text": step["user"], "source": step.get("user_source")})
    return out
