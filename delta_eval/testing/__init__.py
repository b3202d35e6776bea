"""Test doubles, for this library's tests and for users' own: models that need no network.

- :class:`ScriptedAdapter` answers from a script (or a function of the request) and keeps every request it got,
  so a test can check exactly what a variant sends.
- :class:`SimulatedAdapter` (the ``simulated:`` model) answers from recorded conversations, with seeded
  behaviours that make a candidate differ; it runs a whole pipeline offline.
- :func:`registered_adapters` undoes, when its block ends, every adapter a test registered.
"""

from delta_eval.adapters.recordings import RecordingIndex
from delta_eval.adapters.registry import registered_adapters
from delta_eval.adapters.simulated import SimulatedAdapter, SimulatedBehaviour
from delta_eval.testing.scripted import ScriptedAdapter, tool_call_message

__all__ = [
    "RecordingIndex",
    "ScriptedAdapter",
    "SimulatedAdapter",
    "SimulatedBehaviour",
    "registered_adapters",
    "tool_call_message",
]
