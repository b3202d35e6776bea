"""Stand-in models for demos and tests: the seeded ``simulated:`` model and a scripted adapter.

Users' own tests can use them too: ``ScriptedAdapter`` to check what a variant sends, ``SimulatedAdapter`` to run a
whole pipeline offline.
"""

from delta_eval.testing.recordings import RecordingIndex
from delta_eval.testing.scripted import ScriptedAdapter, tool_call_message
from delta_eval.testing.simulated import SimulatedAdapter, SimulatedBehaviour

__all__ = ["RecordingIndex", "ScriptedAdapter", "SimulatedAdapter", "SimulatedBehaviour", "tool_call_message"]
