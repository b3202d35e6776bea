"""The simulated model as a session's tool simulator: when a request asks for a tool's result (the layout of
:class:`~delta_eval.replay.session.SessionTools`: ``<tool>``, ``<examples>`` and ``<call>`` sections of the last
message), it answers with the recorded result of an example made with the same arguments, else with the first
example's result (a result of the right shape), else with an error saying the record was not found.

Example:
    >>> text = ('<tool>\\n{"name": "get"}\\n</tool>\\n<examples>\\n{"arguments": {"id": "A"}, "result": "a"}\\n'
    ...         '</examples>\\n<call>\\n{"name": "get", "arguments": "{\\\\"id\\\\": \\\\"B\\\\"}"}\\n</call>')
    >>> tool_answer(text)
    'a'
"""

from __future__ import annotations

import json
from typing import Any

from delta_eval.calls import ModelRequest
from delta_eval.tagged import sections, unescape

__all__ = ["is_tool_simulator", "tool_answer"]


def _sections(text: str) -> dict[str, str]:
    if "<call>" not in text:
        return {}
    try:
        return {name: unescape(body) for name, body in sections(text)}
    except ValueError:
        return {}


def is_tool_simulator(request: ModelRequest) -> bool:
    """Whether ``request`` asks for a simulated tool result."""
    last = request.messages[-1] if request.messages else None
    if last is None or last.role != "user" or not last.content:
        return False
    return {"tool", "examples", "call"} <= set(_sections(last.content))


def tool_answer(text: str) -> str:
    """The simulated tool's result for the prompt ``text`` (see the module docstring)."""
    found = _sections(text)
    examples: list[dict[str, Any]] = []
    for line in found.get("examples", "").splitlines():
        try:
            examples.append(json.loads(line))
        except ValueError:
            continue
    try:
        call = json.loads(found.get("call", "{}"))
        args = json.loads(call.get("arguments") or "{}")
    except ValueError:
        args = None
    for example in examples:
        if example.get("arguments") == args:
            return str(example.get("result", ""))
    if examples:
        return str(examples[0].get("result", ""))
    return json.dumps({"error": "not found"})
