"""Test doubles, for this library's tests and for users' own: models and providers that need no network.

- :class:`ScriptedAdapter` answers from a script (or a function of the request) and keeps every request it got,
  so a test can check exactly what a variant sends.
- :class:`SimulatedAdapter` (the ``simulated:`` model) answers from recorded conversations, with seeded
  behaviours that make a candidate differ; it runs a whole pipeline offline.
- :class:`FakeOpenAIServer`, :class:`FakeAnthropicServer`, :class:`FakeGeminiServer`: HTTP servers on 127.0.0.1
  that speak each provider's wire format to its unmodified SDK, answering like the simulated model (or from a
  ``respond`` function), with scripted failures, queued exact replies (:class:`JSONReply`, :class:`StreamReply`)
  and a request log to assert on. Use them as context managers; nothing keeps running after.
- :func:`registered_adapters` undoes, when its block ends, every adapter a test registered.

Example::

    with FakeOpenAIServer(recordings=conversations) as server:
        variant = de.Variant(model="openai:gpt-4.1", provider_options={"base_url": server.base_url, "api_key": "x"})
        result = de.run(conversations=conversations, baseline=variant, candidate=..., out=tmp_path / "run")
        assert server.requests[0].json()["model"] == "gpt-4.1"
"""

import typing as _typing

from delta_eval.lazy import lazy_names as _lazy_names

if _typing.TYPE_CHECKING:
    from delta_eval.adapters.recordings import RecordingIndex
    from delta_eval.adapters.registry import registered_adapters
    from delta_eval.adapters.simulated import SimulatedAdapter, SimulatedBehaviour
    from delta_eval.testing.scripted import ScriptedAdapter, tool_call_message
    from delta_eval.testing.servers.anthropic import FakeAnthropicServer
    from delta_eval.testing.servers.gemini import FakeGeminiServer
    from delta_eval.testing.servers.http import JSONReply, Request, StreamReply
    from delta_eval.testing.servers.openai import FakeOpenAIServer

# Imported on first use: a test that needs the scripted model does not start with every fake server's code.
_EXPORTS = {
    "delta_eval.adapters.recordings": ("RecordingIndex",),
    "delta_eval.adapters.registry": ("registered_adapters",),
    "delta_eval.adapters.simulated": ("SimulatedAdapter", "SimulatedBehaviour"),
    "delta_eval.testing.scripted": ("ScriptedAdapter", "tool_call_message"),
    "delta_eval.testing.servers.anthropic": ("FakeAnthropicServer",),
    "delta_eval.testing.servers.gemini": ("FakeGeminiServer",),
    "delta_eval.testing.servers.http": ("JSONReply", "Request", "StreamReply"),
    "delta_eval.testing.servers.openai": ("FakeOpenAIServer",),
}
if not _typing.TYPE_CHECKING:  # hidden from type checkers, so that a misspelt name stays an error for them
    __getattr__, __dir__ = _lazy_names(__name__, _EXPORTS)

__all__ = [
    "FakeAnthropicServer",
    "FakeGeminiServer",
    "FakeOpenAIServer",
    "JSONReply",
    "RecordingIndex",
    "Request",
    "ScriptedAdapter",
    "SimulatedAdapter",
    "SimulatedBehaviour",
    "StreamReply",
    "registered_adapters",
    "tool_call_message",
]
