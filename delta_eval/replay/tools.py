"""Tool simulation: tools never run live during a replay.

The default simulator answers a replayed call with the recorded result when the call matches the recorded call at
the same position in the turn (same tool, equivalent arguments, see :mod:`delta_eval.matching`). Once a call
diverges, the world of the replay is no longer the recorded one, so that call and every later call in the turn get
a simulated result saying the tool could not be executed in this replay, and that the assistant should continue
with what it has without claiming the action succeeded.

A custom simulator is any callable ``(call, context) -> str | ToolResult`` (sync or async), given to the run as
``tool_simulator=``; it sees the replay point and the calls made so far, and may fall back to the default.

Example:
    >>> from delta_eval.schema import ToolCall, TurnOutput, Step, ToolResult, ReplayPoint
    >>> rec = TurnOutput(steps=(Step(tool_calls=(ToolCall(id="a", name="f", arguments='{"x": 1}'),),
    ...                              tool_results=(ToolResult(call_id="a", name="f", content="42"),)),))
    >>> point = ReplayPoint(pair_id="c#0", conversation_id="c", turn_index=0, message_index=1, context=(),
    ...                     recorded=rec)
    >>> sim = RecordedToolSimulator()
    >>> sim(ToolCall(id="z", name="f", arguments='{"x": 1.0}'), ToolContext(point=point, position=0)).content
    '42'
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from delta_eval.matching import DEFAULT_MATCH, MatchOptions, calls_equivalent
from delta_eval.schema import ReplayPoint, ToolCall, ToolResult

__all__ = ["DIVERGED_MESSAGE", "RecordedToolSimulator", "ToolContext", "ToolSimulator", "run_simulator"]

DIVERGED_MESSAGE = (
    "This tool could not be executed in this replay: the call differs from the one recorded at this step, so no "
    "result is available. Nothing was changed. Continue with the information you already have, and do not tell "
    "the user that this action succeeded."
)


@dataclass
class ToolContext:
    """What a simulator knows about a call: the replay point, the call's position among the turn's calls (0-based),
    the calls made before it in this replay, and whether the replay already diverged from the recording."""

    point: ReplayPoint
    position: int
    previous_calls: tuple[ToolCall, ...] = ()
    diverged: bool = False
    extra: dict[str, object] = field(default_factory=dict)


ToolSimulator = Callable[[ToolCall, ToolContext], "str | ToolResult | Awaitable[str | ToolResult]"]


class RecordedToolSimulator:
    """The default simulator: the recorded result while the replay follows the recording, a non-success after."""

    def __init__(self, match: MatchOptions = DEFAULT_MATCH) -> None:
        self.match = match

    def __call__(self, call: ToolCall, ctx: ToolContext) -> ToolResult:
        recorded_calls = ctx.point.recorded.tool_calls
        if not ctx.diverged and ctx.position < len(recorded_calls):
            expected = recorded_calls[ctx.position]
            if calls_equivalent(call, expected, self.match):
                result = _recorded_result(ctx.point, ctx.position)
                if result is not None:
                    return ToolResult(call_id=call.id, name=call.name, content=result, source="recorded")
        return ToolResult(call_id=call.id, name=call.name, content=diverged_content(call), source="simulated")


def diverged_content(call: ToolCall) -> str:
    """The simulated result of a call that left the recording."""
    return json.dumps({"error": "not_executed_in_replay", "tool": call.name, "message": DIVERGED_MESSAGE})


def _recorded_result(point: ReplayPoint, position: int) -> str | None:
    k = 0
    for step in point.recorded.steps:
        for call in step.tool_calls:
            if k == position:
                # Results answer calls by id; parallel results need not come back in call order.
                return next((r.content for r in step.tool_results if r.call_id == call.id), None)
            k += 1
    return None


async def run_simulator(simulator: ToolSimulator, call: ToolCall, ctx: ToolContext) -> ToolResult:
    """Call a simulator (sync or async) and normalise its answer to a :class:`ToolResult`."""
    out = simulator(call, ctx)
    if inspect.isawaitable(out):
        out = await out
    if isinstance(out, ToolResult):
        return out
    return ToolResult(call_id=call.id, name=call.name, content=str(out), source="custom")
