"""Sessions: a recorded conversation rolled forward turn by turn, each side with its own model, one simulated user.

Both sides start from the same opening: the recorded messages up to and including the ``start``-th user message
(the first by default). Then, until the session ends, the side's model acts (one turn, tool rounds capped as in a
turn-level replay, by :class:`~delta_eval.replay.engine.Replayer` itself) and the user answers. A session ends when
the user says the stop token, when the agent calls a stop tool (a transfer to a human, a terminal action), after
``max_turns`` agent turns, or when a side left the recording and only recorded user messages were to be had.

The user (:class:`~delta_eval.replay.user_simulator.UserSimulator`): with ``scripted``, the recorded user's messages
while the side stays on the recording (each of its turns made the recorded calls, or answered in text where the
recording did); after that, or without ``scripted``, the user simulator's model.

Tools (:class:`SessionTools`): the recorded result where a call is equivalent to one recorded anywhere in the
conversation (its n-th such call gets the n-th recorded result, so a record read again after an update gets its
updated state); otherwise the user's own tool simulator, else an LLM playing the tool from its schema and the
recorded results of that tool (cached; marked ``llm``), else the failure result of a turn-level replay
(``simulated``). Every result says where it came from, as every user message does (``Step.user_source``).

A session is stored as one :class:`~delta_eval.schema.Replay` per side: its ``output`` is the whole transcript
(each agent turn's steps, the user's answer on the turn's last step), ``finish_reason`` how it ended
(:data:`SESSION_ENDS`), usage, cost and latency summed over its agent turns, and each turn's deterministic checks
added up (:func:`session_checks`). The calls of the user simulator and the LLM tool simulator are not the side's:
they are rows of ``simulator_calls`` (:class:`~delta_eval.replay.simulator_log.SimulatorLog`, on the side's
:class:`~delta_eval.replay.engine.SideReplay`). The recorded rest of the conversation, in the same shape, is the
point's ``recorded`` output.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from delta_eval.adapters.client import ModelClient
from delta_eval.calls import ModelRequest
from delta_eval.exceptions import ProviderError
from delta_eval.matching import DEFAULT_MATCH, MatchOptions, calls_equivalent
from delta_eval.pricing import Price, Spend
from delta_eval.replay.checks import MAX_PROBLEMS
from delta_eval.replay.engine import Replayer, SideReplay
from delta_eval.replay.points import _turn
from delta_eval.replay.simulator_log import SimulatorLog
from delta_eval.replay.tools import ToolContext, ToolSimulator, diverged_content, run_simulator
from delta_eval.replay.user_simulator import UserSimulator, UserTurn, parse_reply
from delta_eval.schema import (
    Conversation,
    ErrorRecord,
    Message,
    Replay,
    ReplayPoint,
    Side,
    Step,
    ToolCall,
    ToolResult,
    TurnOutput,
    Usage,
)
from delta_eval.tagged import escape, section

__all__ = [
    "SESSION_ENDS",
    "SessionReplayer",
    "SessionTools",
    "recorded_calls",
    "recorded_turn_points",
    "session_checks",
    "session_point",
    "session_turns",
    "tool_prompt",
    "transcript",
    "transcript_messages",
    "turn_point",
]

#: How a session ends: the user said the stop token; the agent called a stop tool; the turn cap; the side left the
#: recording with only recorded user messages to answer it; a provider or simulator error.
SESSION_ENDS = ("user_stop", "stop_tool", "turn_cap", "off_recording", "error")


def transcript(messages: Sequence[Message]) -> TurnOutput:
    """``messages`` (what followed a session's opening) as a session transcript: each agent turn's steps, the user's
    messages on the step before them (``user_source="recorded"``).

    Example:
        >>> t = transcript([Message(role="assistant", content="Your id?"), Message(role="user", content="mia"),
        ...                 Message(role="assistant", content="Thanks.")])
        >>> [(s.text, s.user) for s in t.steps]
        [('Your id?', 'mia'), ('Thanks.', None)]
    """
    steps: list[Step] = []
    i = 0
    while i < len(messages):
        m = messages[i]
        if m.role == "assistant":
            turn, i = _turn(messages, i)
            steps += turn.steps
            if turn.final_text is not None:
                steps.append(Step(text=turn.final_text))
            continue
        if m.role == "user":
            said = m.content or ""
            last = steps[-1] if steps and steps[-1].user is None else None
            if last is None:
                steps.append(Step(user=said, user_source="recorded"))
            else:
                steps[-1] = last.model_copy(update={"user": said, "user_source": "recorded"})
        i += 1  # a tool result outside a turn, a system message: not part of what the sides are compared on
    return TurnOutput(steps=tuple(steps))


def session_turns(out: TurnOutput) -> list[tuple[TurnOutput, Step | None]]:
    """A session transcript split into agent turns, each with the step that carries the user's answer (``None``
    for a last turn nobody answered).

    Example:
        >>> t = TurnOutput(steps=(Step(text="Your id?", user="mia"), Step(text="Thanks.")))
        >>> [(turn.final_text, step.user if step else None) for turn, step in session_turns(t)]
        [('Your id?', 'mia'), ('Thanks.', None)]
    """
    turns: list[tuple[TurnOutput, Step | None]] = []
    current: list[Step] = []

    def close(answered: Step | None) -> None:
        steps = list(current)
        final = None
        if steps and not steps[-1].tool_calls and steps[-1].text is not None:
            final = steps.pop().text
        turns.append((TurnOutput(steps=tuple(s.model_copy(update={"user": None, "user_source": None})
                                             for s in steps), final_text=final), answered))  # fmt: skip
        current.clear()

    for step in out.steps:
        current.append(step)
        if step.user is not None:
            close(step)
    if current:
        close(None)
    return turns


def session_point(conversation: Conversation, start: int = 1) -> ReplayPoint | None:
    """The point a session of ``conversation`` starts from: the recorded messages up to and including its
    ``start``-th user message (the opening), the rest as the recorded transcript. ``None`` when the conversation
    has fewer user messages, or nothing after the opening. Its pair id is ``"{conversation_id}#session"``."""
    messages = conversation.messages
    seen, end = 0, None
    for i, m in enumerate(messages):
        if m.role == "user":
            seen += 1
            if seen == start:
                end = i + 1
                break
    if end is None or end >= len(messages):
        return None
    turns_before = sum(
        1
        for i, m in enumerate(messages[:end])
        if m.role == "assistant" and (i == 0 or messages[i - 1].role in ("user", "system"))
    )
    return ReplayPoint(
        pair_id=f"{conversation.id}#session",
        conversation_id=conversation.id,
        turn_index=turns_before,
        message_index=end,
        context=tuple(messages[:end]),
        recorded=transcript(messages[end:]),
        tools=conversation.tools,
        metadata=conversation.metadata,
    )


def turn_point(point: ReplayPoint, k: int, messages: Sequence[Message], recorded: TurnOutput) -> ReplayPoint:
    """Agent turn ``k`` of the session of ``point`` as a turn-level point: ``messages`` so far as its context,
    ``recorded`` as what production did there (empty once a side has left the recording)."""
    return ReplayPoint(
        pair_id=f"{point.pair_id}/t{k}",
        conversation_id=point.conversation_id,
        turn_index=point.turn_index + k,
        message_index=len(messages),
        epoch=point.epoch,
        context=tuple(messages),
        recorded=recorded,
        tools=point.tools,
        metadata=point.metadata,
    )


def recorded_turn_points(point: ReplayPoint, max_turns: int | None = None) -> list[tuple[ReplayPoint, Step | None]]:
    """The agent turns of the session of ``point`` as the recording has them (at most ``max_turns``), each as the
    turn-level point a side on the recording is asked (the opening and the recorded transcript before it as its
    context), with the step carrying the recorded user's answer to it (``None``: nobody answered)."""
    messages: list[Message] = list(point.context)
    out: list[tuple[ReplayPoint, Step | None]] = []
    for k, (turn, answered) in enumerate(session_turns(point.recorded)[:max_turns]):
        out.append((turn_point(point, k, messages, turn), answered))
        messages += _messages(turn)
        if answered is not None and answered.user is not None:
            messages.append(Message(role="user", content=answered.user))
    return out


def transcript_messages(out: TurnOutput) -> list[Message]:
    """The messages a session transcript (or one turn) adds to its conversation: the assistant's, its tools'
    results and the user's answers."""
    return _messages(out, users=True)


def recorded_calls(point: ReplayPoint) -> list[tuple[ToolCall, str]]:
    """Every tool call recorded in the conversation of a session point (opening and recorded transcript), with its
    result, in order."""
    out: list[tuple[ToolCall, str]] = []
    results = {m.tool_call_id: m.text_with_media() for m in point.context if m.role == "tool" and m.tool_call_id}
    for m in point.context:
        for c in m.tool_calls:
            if c.id in results:
                out.append((c, results[c.id]))
    for step in point.recorded.steps:
        by_id = {r.call_id: r.content for r in step.tool_results}
        for c in step.tool_calls:
            if c.id in by_id:
                out.append((c, by_id[c.id]))
    return out


TOOL_INSTRUCTIONS = """You simulate a tool of a customer-service system, for a test. The tool's name, description
and JSON Schema are in <tool>; results it returned in recorded conversations are in <examples>; the call to answer
is in <call>. Answer with only the result the tool would return, in the format of the examples. If the call cannot
succeed (unknown identifiers, invalid arguments), return the error the tool would return."""


def tool_prompt(call: ToolCall, spec: Mapping[str, Any] | None, recorded: Sequence[tuple[ToolCall, str]]) -> str:
    """What the LLM tool simulator is asked for ``call`` (after :data:`TOOL_INSTRUCTIONS`): the tool's ``spec``,
    up to three results of the tool in ``recorded`` (the conversation's calls and results) as examples, the call."""
    examples = [json.dumps({"arguments": c.parsed_arguments, "result": r}, ensure_ascii=False, default=str)
                for c, r in recorded if c.name == call.name][:3]  # fmt: skip
    return "\n\n".join(
        [
            section("tool", escape(json.dumps(spec or {"name": call.name}, ensure_ascii=False))),
            section("examples", escape("\n".join(examples)) or "(none recorded)"),
            section("call", escape(json.dumps({"name": call.name, "arguments": call.arguments}, ensure_ascii=False))),
        ]
    )


@dataclass
class SessionTools:
    """The tool simulator of one side's session (see the module docstring); built per session by
    :class:`SessionReplayer`."""

    recorded: list[tuple[ToolCall, str]]
    custom: ToolSimulator | None = None
    llm: ModelClient | None = None
    tools: Mapping[str, Any] = field(default_factory=dict)
    match: MatchOptions = DEFAULT_MATCH
    namespace: str = ""
    log: SimulatorLog | None = None
    prices: Mapping[str, Price] | None = None
    _used: set[int] = field(default_factory=set)

    async def __call__(self, call: ToolCall, ctx: ToolContext) -> ToolResult:
        """The result of ``call``, named for where it came from."""
        found = [k for k, (c, _) in enumerate(self.recorded) if calls_equivalent(call, c, self.match)]
        if found:
            k = next((k for k in found if k not in self._used), found[-1])
            self._used.add(k)
            return ToolResult(call_id=call.id, name=call.name, content=self.recorded[k][1], source="recorded")
        if self.custom is not None:
            return await run_simulator(self.custom, call, ctx)
        if self.llm is not None:
            return await self._llm(call)
        return ToolResult(call_id=call.id, name=call.name, content=diverged_content(call), source="simulated")

    async def _llm(self, call: ToolCall) -> ToolResult:
        assert self.llm is not None
        body = tool_prompt(call, self.tools.get(call.name), self.recorded)
        request = ModelRequest(
            model=self.llm.model,
            messages=(Message(role="system", content=TOOL_INSTRUCTIONS), Message(role="user", content=body)),
        )
        namespace = f"tool:{self.namespace}"
        result = await self.llm.generate(request, namespace=namespace)
        if self.log is not None:
            key = request.cache_key(namespace=namespace)
            self.log.add("tool_simulator", call.name, self.llm, key, result, self.prices)
        content = result.response.message.content or ""
        return ToolResult(call_id=call.id, name=call.name, content=content, source="llm")


@dataclass
class SessionReplayer:
    """Rolls sessions forward on one side: ``turns`` replays each agent turn (its model, variant and tool-round
    cap), ``user`` answers, ``tools`` (a custom simulator) and ``tool_model`` (an LLM tool simulator) stand in for
    calls the recording did not make.

    Example::

        sessions = SessionReplayer(replayer, UserSimulator(client, goal="instruction"), scripted=True)
        side = await sessions.replay(session_point(conversation), side="candidate")
        side.replay.finish_reason  # "user_stop", ...
    """

    turns: Replayer
    user: UserSimulator
    scripted: bool = True
    max_turns: int = 20
    stop_tools: tuple[str, ...] = ()
    custom_tools: ToolSimulator | None = None
    tool_model: ModelClient | None = None
    #: Prices of the simulators' models, overriding the catalogue's (the run's ``prices``).
    prices: Mapping[str, Price] | None = None

    async def replay(self, point: ReplayPoint, side: Side) -> SideReplay:
        """The session of ``point`` on this side; a failure ends it with an error row, never an exception."""
        log = SimulatorLog(point, side)
        sim = SessionTools(
            recorded_calls(point),
            self.custom_tools,
            self.tool_model,
            {t.name: t.model_dump() for t in point.tools},
            self.turns.match,
            namespace=f"{point.conversation_id}@{point.epoch}",
            log=log,
            prices=self.prices,
        )
        turns = replace(self.turns, simulator=sim)
        recorded = session_turns(point.recorded)
        messages: list[Message] = list(point.context)
        steps: list[Step] = []
        spend = Spend()
        first: SideReplay | None = None
        rolled: list[Replay] = []  # each agent turn's replay, with its deterministic checks
        last: SideReplay | None = None
        end = "turn_cap"
        on_recording = True
        goal: str | None = None
        error: Exception | None = None
        for k in range(self.max_turns):
            rec_turn, rec_user = recorded[k] if on_recording and k < len(recorded) else (TurnOutput(), None)
            done = await turns.replay(turn_point(point, k, messages, rec_turn), side)
            first = first or done
            last = done
            rolled.append(done.replay)
            r = done.replay
            spend.add(r.usage, cost_usd=r.cost_usd, latency_ms=r.latency_ms)
            spend.calls += r.model_calls - 1  # add() counted one call for the turn
            spend.cached_calls += r.cached_calls
            out = r.output
            steps += out.steps
            if out.final_text is not None:
                steps.append(Step(text=out.final_text, reasoning=out.final_reasoning))
            messages += _messages(out)
            if r.error is not None:
                end = "error"
                break
            on_recording = on_recording and bool(r.matches_recorded) and k < len(recorded)
            if any(fnmatch.fnmatchcase(c.name, p) for c in out.tool_calls for p in self.stop_tools):
                end = "stop_tool"
                break
            if k == self.max_turns - 1:
                break  # the cap: nobody answers the last turn
            try:
                said = await self._answer(point, rec_user, on_recording, messages, log, goal)
            except (ProviderError, KeyError) as exc:
                error, end = exc, "error"
                break
            if isinstance(said, str):  # the goal, now known
                goal = said
                try:
                    said = await self._answer(point, rec_user, on_recording, messages, log, goal)
                except ProviderError as exc:
                    error, end = exc, "error"
                    break
            assert isinstance(said, UserTurn)
            if said.text is None and not said.stop:
                end = "off_recording"
                break
            if said.text is not None:
                if not steps:
                    steps.append(Step())
                steps[-1] = steps[-1].model_copy(update={"user": said.text, "user_source": said.source})
                messages.append(Message(role="user", content=said.text))
            if said.stop:
                end = "user_stop"
                break
        failed = error is not None or last is None or last.replay.error is not None
        # On the recording to the end: every recorded turn made again, none left out.
        whole = on_recording and len(rolled) == len(recorded)
        checks = {} if failed else session_checks(rolled, whole)
        return self._done(point, side, steps, spend, log, end, first, last, error, checks)

    async def _answer(
        self,
        point: ReplayPoint,
        recorded: Step | None,
        on_recording: bool,
        messages: list[Message],
        log: SimulatorLog,
        goal: str | None,
    ) -> UserTurn | str:
        """The user's next message; the goal (a string) when the simulator needs it first."""
        scripted = self.scripted or self.user.client is None  # no user model: the recorded user is all there is
        if scripted and on_recording and recorded is not None and recorded.user is not None:
            text, stop = parse_reply(recorded.user)
            return UserTurn(text, "recorded", stop)
        if self.user.client is None:
            # Recorded messages only, and the side left the recording (or the recorded user said no more).
            return UserTurn(None, "recorded", stop=recorded is None and on_recording)
        if goal is None:
            whole = [*point.context, *_messages(point.recorded, users=True)]
            return await self.user.goal_of(point, whole, log)
        return await self.user.reply(point, goal, messages, log)

    def _done(
        self,
        point: ReplayPoint,
        side: Side,
        steps: list[Step],
        spend: Spend,
        log: SimulatorLog,
        end: str,
        first: SideReplay | None,
        last: SideReplay | None,
        error: Exception | None,
        checks: dict[str, Any],
    ) -> SideReplay:
        output = TurnOutput(steps=tuple(steps))
        base = last.replay if last is not None else None
        failed = error is not None or (base is not None and base.error is not None)
        message = (
            str(error) if error is not None else (base.error if base is not None and base.error is not None else None)
        )
        replay = Replay(
            pair_id=point.pair_id,
            conversation_id=point.conversation_id,
            turn_index=point.turn_index,
            epoch=point.epoch,
            side=side,
            variant=self.turns.variant.name,
            model=self.turns.variant.model,
            output=output,
            finish_reason=end,
            provider_finish_reason=base.provider_finish_reason if base is not None else None,
            hit_tool_cap=any(s.tool_calls and not s.tool_results for s in steps),
            usage=spend.usage if spend.calls else Usage(),
            cost_usd=spend.cost_usd,
            latency_ms=spend.latency_ms,
            ttft_ms=first.replay.ttft_ms if first is not None else None,
            model_calls=spend.calls,
            cached_calls=spend.cached_calls,
            served_model=base.served_model if base is not None else None,
            finished_at=datetime.now(UTC),
            **checks,
            # What the pair's recorded row holds (the point's recorded turn): the decision reads it here, unjoined.
            recorded_acted=bool(point.recorded.tool_calls),
            error=message if failed else None,
            error_type=(type(error).__name__ if error is not None else base.error_type if base is not None else None)
            if failed
            else None,
        )
        row: ErrorRecord | None = None
        if error is not None:
            row = ErrorRecord.from_exception(
                error,
                "replay",
                message=f"{side} session of {point.pair_id}: the user simulator failed: {error}",
                record=point.pair_id,
                conversation_id=point.conversation_id,
                pair_id=point.pair_id,
            )
        elif last is not None and last.error is not None:
            row = last.error.model_copy(update={"pair_id": point.pair_id, "record": point.pair_id})
        return SideReplay(replay, first.request if first is not None else None, row, tuple(log.calls))


def session_checks(turns: Sequence[Replay], on_recording: bool) -> dict[str, Any]:
    """The deterministic checks of a session's agent turns (:mod:`delta_eval.replay.checks`, run on each turn
    against its recorded turn) as the session's own, so that the decision's check rates and gates count sessions:
    ``invalid_tool_calls`` their number over every turn, with each problem prefixed by its turn; ``text_instead_of_
    action`` and ``no_decision`` whether any turn did so; ``matches_recorded`` whether the side stayed on the
    recording to its end (``on_recording``: every recorded turn made again with the recorded calls).

    Example:
        >>> t = [Replay(pair_id="p", conversation_id="c", turn_index=k, side="candidate", variant="v", model="m",
        ...             output=TurnOutput(), finish_reason="stop", invalid_tool_calls=k,
        ...             tool_call_problems=("f: no such tool",) * k, no_decision=False) for k in range(3)]
        >>> c = session_checks(t, on_recording=False)
        >>> c["invalid_tool_calls"], c["tool_call_problems"][0], c["no_decision"], c["matches_recorded"]
        (3, 'turn 2: f: no such tool', False, False)
    """
    problems = [f"turn {k + 1}: {p}" for k, r in enumerate(turns) for p in r.tool_call_problems]
    return {
        "invalid_tool_calls": sum(r.invalid_tool_calls for r in turns),
        "tool_call_problems": tuple(problems[:MAX_PROBLEMS]),
        "matches_recorded": on_recording,
        "text_instead_of_action": any(r.text_instead_of_action for r in turns),
        "no_decision": any(bool(r.no_decision) for r in turns),
    }


def _messages(out: TurnOutput, *, users: bool = False) -> list[Message]:
    """The messages a turn (or a transcript) adds to the conversation: the assistant's, its tools' results, and
    with ``users`` the user's answers."""
    messages: list[Message] = []
    for step in out.steps:
        # Calls left unanswered at the tool-round cap are not sent on: providers refuse a call without its result.
        calls = step.tool_calls if step.tool_results else ()
        if step.text is not None or calls:
            messages.append(Message(role="assistant", content=step.text, tool_calls=calls))
        messages += [Message(role="tool", tool_call_id=r.call_id, name=r.name, content=r.content)
                     for r in step.tool_results]  # fmt: skip
        if users and step.user is not None:
            messages.append(Message(role="user", content=step.user))
    if out.final_text is not None:
        messages.append(Message(role="assistant", content=out.final_text))
    return messages
