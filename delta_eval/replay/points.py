"""Replay points: the assistant turns of a recorded conversation.

A turn starts at an assistant message that follows a user (or system) message and runs until the assistant next
speaks in plain text: assistant messages with tool calls and the tool results that answer them, then the final text.
A turn that ends without final text (the conversation stops after a tool result, or the user speaks) keeps its
steps and has no final text. The context of a turn is every message before it, exactly as recorded; where the source
recorded each model call (a trace, :attr:`~delta_eval.schema.Conversation.calls`), it is what that call was sent:
its system prompt, its tools and its history, and a call that switched the agent's system prompt or tools (another
skill after a hand-off) starts a turn of its own.

A greeting is a turn before the first user message that makes no tool calls, in a conversation where a user speaks
later: a fixed opening ("Hi! How can I help?") with nothing to answer, left out unless asked for. A turn before any
user message that calls tools, or any turn of a conversation with no user message at all (an autonomous agent handed
its task in the system prompt), is a decision of the agent and is replayed.

Example:
    >>> from delta_eval.schema import Conversation, Message
    >>> conv = Conversation(id="c", messages=(
    ...     Message(role="system", content="policy"), Message(role="user", content="hi"),
    ...     Message(role="assistant", content="hello"), Message(role="user", content="bye"),
    ...     Message(role="assistant", content="goodbye")))
    >>> [(p.pair_id, len(p.context), p.recorded.final_text) for p in replay_points(conv)]
    [('c#0', 2, 'hello'), ('c#1', 4, 'goodbye')]
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence

from delta_eval.schema import (
    CallContext,
    Conversation,
    History,
    Message,
    ReplayPoint,
    Step,
    ToolResult,
    ToolSpec,
    TurnOutput,
)

__all__ = [
    "count_turns",
    "epochs",
    "pair_id",
    "pair_weight",
    "point_at",
    "recorded_calls",
    "replay_calls",
    "replay_points",
    "select_turns",
]


def pair_id(conversation_id: str, turn_index: int) -> str:
    """The id of a replay point (and of its pair): ``"{conversation_id}#{turn_index}"``."""
    return f"{conversation_id}#{turn_index}"


def _turn(messages: Sequence[Message], start: int, switches: frozenset[int] = frozenset()) -> tuple[TurnOutput, int]:
    """The turn starting at ``messages[start]`` (an assistant message) and the index just past it; it ends early
    where the agent's context switches (another skill's call starts a turn of its own)."""
    steps: list[Step] = []
    i = start
    while i < len(messages) and messages[i].role == "assistant" and (i == start or i not in switches):
        m = messages[i]
        i += 1
        if not m.tool_calls:
            return TurnOutput(steps=tuple(steps), final_text=m.content), i
        results = []
        while i < len(messages) and messages[i].role == "tool":
            t = messages[i]
            # A recorded result's media are named by their placeholders: the turn's results are kept on every replay
            # row, where bytes would be repeated per pair (the context's own messages keep their media).
            results.append(ToolResult(call_id=t.tool_call_id or "", name=t.name or "", content=t.text_with_media()))
            i += 1
        steps.append(Step(text=m.content, tool_calls=m.tool_calls, tool_results=tuple(results)))
    return TurnOutput(steps=tuple(steps)), i


def replay_points(conversation: Conversation, *, greetings: bool = False) -> Iterator[ReplayPoint]:
    """Every assistant turn of ``conversation`` as a :class:`ReplayPoint`, in order.

    A greeting (see the module docstring: a plain-text turn before the first user message of a conversation where
    a user speaks later, as exports that open with "Hi! How can I help?" have) is left out unless ``greetings``:
    replayed, the model would be sent a request with nothing to answer. Turn numbers count it either way, so a turn
    keeps its pair id.
    """
    messages = conversation.messages
    calls = {c.message_index: c for c in conversation.calls}
    switches = _switches(conversation)
    for turn_index, (i, greeting) in enumerate(_turn_starts(messages, switches)):
        if greeting and not greetings:
            continue
        recorded, _ = _turn(messages, i, switches)
        context, tools = _context(conversation, i, calls.get(i))
        # Built without validation: every part is already a validated piece of the conversation, and validating the
        # history again at each turn would make a long conversation's points cost quadratic time.
        yield ReplayPoint.model_construct(
            pair_id=pair_id(conversation.id, turn_index),
            conversation_id=conversation.id,
            turn_index=turn_index,
            message_index=i,
            context=context,
            recorded=recorded,
            tools=tools,
            metadata=conversation.metadata,
        )


def point_at(conversation: Conversation, turn_index: int) -> ReplayPoint | None:
    """The replay point of the turn ``turn_index`` of ``conversation`` (greetings counted, as a run counts them), as
    the run built it: the context the sides were sent, the tools offered, the recorded turn; ``None`` if none."""
    for point in replay_points(conversation, greetings=True):
        if point.turn_index == turn_index:
            return point
    return None


def _switches(conversation: Conversation) -> frozenset[int]:
    """The recorded calls whose system prompt or tools differ from the call before: each starts a turn, replayed
    with what that call was sent."""
    out: set[int] = set()
    previous: tuple[object, object] | None = None
    for call in conversation.calls:
        now = (call.system, call.tools)
        if previous is not None and now != previous:
            out.add(call.message_index)
        previous = now
    return frozenset(out)


def _context(
    conversation: Conversation, i: int, call: CallContext | None
) -> tuple[Sequence[Message], tuple[ToolSpec, ...]]:
    """The messages and tools the turn at ``messages[i]`` was sent: the recorded call's own where the source
    records them, else every message before it and the conversation's tools."""
    messages = conversation.messages
    if call is None:
        return History(messages, i), conversation.tools
    tools = call.tools if call.tools is not None else conversation.tools
    before = History(messages, i)
    recorded_system = [m.content for m in before if m.role == "system" and m.content]
    if call.input is None and call.system == ("\n\n".join(recorded_system) if recorded_system else None):
        return before, tools  # as in the log: shared, not copied
    rest = call.input if call.input is not None else tuple(m for m in before if m.role != "system")
    head = (Message(role="system", content=call.system),) if call.system is not None else ()
    return (*head, *rest), tools


def _turn_starts(messages: Sequence[Message], switches: frozenset[int] = frozenset()) -> Iterator[tuple[int, bool]]:
    """Where each turn starts, and whether it is a greeting: at an assistant message that does not continue a turn
    (after a user or system message, or after plain assistant text; after a tool result the assistant goes on with
    its turn), and where a recorded call switched the agent's system prompt or tools."""
    # Only a turn before the first user message can be a greeting, and only if a user message comes at all: with
    # none, the conversation is an autonomous run and its first turn is the agent's first decision.
    first_user = next((i for i, m in enumerate(messages) if m.role == "user"), None)
    previous: Message | None = None
    for i, m in enumerate(messages):
        if m.role == "assistant" and (
            previous is None
            or previous.role in ("user", "system")
            or (previous.role == "assistant" and not previous.tool_calls)
            or i in switches
        ):
            # A turn that starts with tool calls acts on something (a ticket in the system prompt): not a greeting.
            yield i, first_user is not None and i < first_user and not m.tool_calls
        previous = m


def count_turns(conversation: Conversation, *, greetings: bool = False) -> int:
    """How many points :func:`replay_points` yields, without building them (sampling counts every conversation).

    Example:
        >>> from delta_eval.schema import Conversation, Message
        >>> conv = Conversation(id="c", messages=(Message(role="assistant", content="Hi! How can I help?"),
        ...     Message(role="user", content="hi"), Message(role="assistant", content="hello")))
        >>> count_turns(conv), count_turns(conv, greetings=True)
        (1, 2)
    """
    starts = _turn_starts(conversation.messages, _switches(conversation))
    return sum(1 for _, greeting in starts if greetings or not greeting)


def select_turns(points: list[ReplayPoint], max_turns: int | None, seed: int) -> list[ReplayPoint]:
    """At most ``max_turns`` of a conversation's points, drawn reproducibly (by ``md5(seed:pair_id)``), in order.

    ``None`` keeps them all.
    """
    if max_turns is None or len(points) <= max_turns:
        return points

    def rank(p: ReplayPoint) -> str:
        return hashlib.md5(f"{seed}:{p.pair_id}".encode(), usedforsecurity=False).hexdigest()

    keep = {p.pair_id for p in sorted(points, key=rank)[:max_turns]}
    return [p for p in points if p.pair_id in keep]


def recorded_calls(turn: TurnOutput, max_tool_rounds: int) -> int:
    """The model calls a replay of ``turn`` makes if it does what was recorded: one per tool round, and one for the
    final text (a turn that ended on a tool round reached no text), at most ``max_tool_rounds + 1``.

    Example:
        >>> from delta_eval.schema import Step, TurnOutput
        >>> recorded_calls(TurnOutput(steps=(Step(), Step()), final_text="done"), 5), recorded_calls(TurnOutput(), 5)
        (3, 1)
    """
    steps = len(turn.steps)
    return min(steps + (1 if turn.final_text or not steps else 0), max_tool_rounds + 1)


def replay_calls(turn: TurnOutput, max_tool_rounds: int) -> int:
    """The model calls a replay of ``turn`` makes if the model does what was recorded: one per tool round and one
    after the last, at most ``max_tool_rounds + 1``. A turn that ended on a tool round (the user spoke next) costs a
    replay one call more than :func:`recorded_calls` counts: the replay asks the model again after the tool results,
    as it does after every round below the cap. The length by which a run orders and deals its pairs.

    Example:
        >>> from delta_eval.schema import Step, TurnOutput
        >>> replay_calls(TurnOutput(steps=(Step(),)), 5), recorded_calls(TurnOutput(steps=(Step(),)), 5)
        (2, 1)
        >>> replay_calls(TurnOutput(steps=(Step(), Step()), final_text="done"), 5), replay_calls(TurnOutput(), 5)
        (3, 1)
    """
    return min(len(turn.steps) + 1, max_tool_rounds + 1)


def pair_weight(weight: float, turns: int, kept: int) -> float:
    """The sampling weight of each kept pair of a conversation of sampling ``weight``: subsampled turns (``kept`` of
    its ``turns``, see :func:`select_turns`) stand for all of the conversation's turns.

    Example:
        >>> pair_weight(2.0, turns=10, kept=4), pair_weight(2.0, turns=0, kept=0)
        (5.0, 2.0)
    """
    return weight * turns / kept if kept else weight


def epochs(points: Iterable[ReplayPoint], k: int) -> Iterator[ReplayPoint]:
    """Each point ``k`` times, numbered ``epoch`` 1..k with pair ids ``"{pair_id}@{epoch}"`` (one epoch: the points
    as they are), so each repeat is a pair of its own: its own replays, cache entries and verdict.

    Example:
        >>> from delta_eval.schema import TurnOutput
        >>> p = ReplayPoint(pair_id="c#0", conversation_id="c", turn_index=0, message_index=1, context=(),
        ...                 recorded=TurnOutput())
        >>> [(q.pair_id, q.epoch) for q in epochs([p], 2)]
        [('c#0@1', 1), ('c#0@2', 2)]
    """
    for point in points:
        if k == 1:
            yield point
            continue
        for e in range(1, k + 1):
            yield point.model_copy(update={"pair_id": f"{point.pair_id}@{e}", "epoch": e})
