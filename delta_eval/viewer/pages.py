"""What the viewer's pages show, computed from the queries' rows: a pair laid out in rounds with the two sides'
differences marked, or a session's two transcripts side by side, agent turn by agent turn, each user message and
tool result marked with where it came from (the decision's lines and the pairs behind them:
:mod:`delta_eval.analysis.evidence`).

Nothing here writes HTML: the templates do, with autoescaping, so model output is always shown as text.

"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from delta_eval.analysis.diff import Segment, json_diff, pretty_json, word_diff
from delta_eval.replay.session import session_turns
from delta_eval.schema import Message, Replay, Step, ToolCall, ToolResult

__all__ = [
    "CallView",
    "RoundView",
    "SessionTurnView",
    "message_view",
    "rounds",
    "session_view",
]


@dataclass
class CallView:
    """One tool call of a round on one side: its name, its arguments (diffed against the other side's call at the
    same place) and its result."""

    name: str
    arguments: list[Segment]
    result: str | None = None
    source: str | None = None
    valid: bool = True


@dataclass
class RoundView:
    """One round of a turn: what each side said and called at this step (``None``: the side had no such step)."""

    index: int
    text: dict[str, list[Segment] | None] = field(default_factory=dict)
    calls: dict[str, list[CallView]] = field(default_factory=dict)
    reasoning: dict[str, str | None] = field(default_factory=dict)


def _plain(text: str | None) -> list[Segment] | None:
    return [Segment(text, "same")] if text else None


def _result_of(call: ToolCall, results: tuple[ToolResult, ...]) -> ToolResult | None:
    return next((r for r in results if r.call_id == call.id), None)


def _calls(step: Step | None, other: Step | None, left: bool) -> list[CallView]:
    if step is None:
        return []
    out = []
    for i, call in enumerate(step.tool_calls):
        twin = other.tool_calls[i] if other is not None and i < len(other.tool_calls) else None
        if twin is None:
            arguments = [Segment(pretty_json(call.arguments), "same")]
        else:
            a, b = json_diff(call.arguments, twin.arguments) if left else json_diff(twin.arguments, call.arguments)
            arguments = a if left else b
            if twin.name != call.name:  # another tool: the whole call differs
                arguments = [Segment(pretty_json(call.arguments), "del" if left else "ins")]
        result = _result_of(call, step.tool_results)
        out.append(
            CallView(
                name=call.name,
                arguments=arguments,
                result=pretty_json(result.content) if result else None,
                source=result.source if result else None,
                valid=call.arguments_valid is not False,
            )
        )
    return out


def rounds(sides: dict[str, Replay]) -> list[RoundView]:
    """Each side's turn in rounds (one step a round: text, tool calls and their results), the baseline's and the
    candidate's texts and arguments diffed; the final text is the last round."""
    steps = {side: list(r.output.steps) for side, r in sides.items()}
    n = max((len(s) for s in steps.values()), default=0)
    out: list[RoundView] = []
    for k in range(n):
        at = {side: (s[k] if k < len(s) else None) for side, s in steps.items()}
        b, c = at.get("baseline"), at.get("candidate")
        view = RoundView(index=k + 1)
        if b is not None and c is not None and (b.text or c.text):
            view.text["baseline"], view.text["candidate"] = word_diff(b.text, c.text)
        for side, step in at.items():
            if side not in view.text:
                view.text[side] = _plain(step.text) if step else None
            view.reasoning[side] = step.reasoning if step else None
        view.calls["baseline"] = _calls(b, c, left=True)
        view.calls["candidate"] = _calls(c, b, left=False)
        if "recorded" in at:
            view.calls["recorded"] = _calls(at["recorded"], None, left=True)
        out.append(view)
    finals = {side: r.output.final_text for side, r in sides.items()}
    if any(finals.values()):
        view = RoundView(index=n + 1)
        fb, fc = finals.get("baseline"), finals.get("candidate")
        if "baseline" in finals and "candidate" in finals:
            view.text["baseline"], view.text["candidate"] = word_diff(fb, fc)
        for side, text in finals.items():
            view.text.setdefault(side, _plain(text))
            view.reasoning[side] = sides[side].output.final_reasoning
            view.calls[side] = []
        out.append(view)
    return out


@dataclass
class SessionTurnView:
    """The k-th agent turn of a session on each side, with the user's answer to it: the turn's rounds (as
    :func:`rounds` lays out a turn, the two sides' texts and arguments diffed), and per side the user's message
    and where it came from (``None``: the side had no such turn, or nobody answered it)."""

    index: int
    rounds: list[RoundView] = field(default_factory=list)
    user: dict[str, str | None] = field(default_factory=dict)
    user_source: dict[str, str | None] = field(default_factory=dict)


def session_view(sides: dict[str, Replay]) -> list[SessionTurnView]:
    """The transcripts of a session pair's sides, agent turn by agent turn (the k-th turn of each side on one row,
    whatever each said), each turn's steps as rounds (tool results with their sources) and the user's answer.

    Example:
        >>> from delta_eval.schema import TurnOutput
        >>> r = Replay(pair_id="c#session", conversation_id="c", turn_index=0, side="baseline", variant="b", model="m",
        ...            output=TurnOutput(steps=(Step(text="Your id?", user="mia", user_source="simulated"),
        ...                                     Step(text="Done."))), finish_reason="user_stop")
        >>> [(t.index, t.user["baseline"], t.user_source["baseline"]) for t in session_view({"baseline": r})]
        [(1, 'mia', 'simulated'), (2, None, None)]
    """
    split = {side: session_turns(r.output) for side, r in sides.items()}
    n = max((len(turns) for turns in split.values()), default=0)
    out = []
    for k in range(n):
        view = SessionTurnView(index=k + 1)
        here: dict[str, Replay] = {}
        for side, turns in split.items():
            turn, answered = turns[k] if k < len(turns) else (None, None)
            if turn is not None:
                here[side] = sides[side].model_copy(update={"output": turn})
            view.user[side] = answered.user if answered is not None else None
            view.user_source[side] = answered.user_source if answered is not None else None
        view.rounds = rounds(here)
        out.append(view)
    return out


def message_view(m: Message) -> dict[str, Any]:
    """A message of the conversation so far, for the template."""
    return {
        "role": m.role,
        "content": m.content or "",
        "name": m.name,
        "calls": [(c.name, pretty_json(c.arguments)) for c in m.tool_calls],
    }
