"""Span-level replay: a turn recorded by a trace is replayed with the system prompt, tools and history its own call
was sent, so an agent that switches skill mid-conversation is replayed as production ran it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import delta_eval as de
from delta_eval.ingest.model_calls import RecordedCall, assemble
from delta_eval.replay.points import count_turns, replay_points
from delta_eval.schema import CallContext, Conversation, Message, ToolCall, ToolSpec

TRIAGE, BILLING = "You are triage. Hand billing questions over.", "You are billing. Refund when asked."
TRANSFER = ToolSpec(name="transfer_to_billing", description="Hand the customer over to billing.")
REFUND = ToolSpec(
    name="refund",
    description="Refund an order.",
    parameters={"type": "object", "properties": {"order": {"type": "string"}}, "required": ["order"]},
)


def _call(id_: str, name: str, args: dict[str, str]) -> ToolCall:
    return ToolCall(id=id_, name=name, arguments=json.dumps(args))


def _skill_switch() -> Conversation:
    """Triage hands over to billing after the first user message; billing sees only the user's messages and the
    no tool traffic (its history is filtered to the user's messages), another system prompt, and the refund tool."""
    u1 = Message(role="user", content="I was charged twice for order 42.")
    a1 = Message(role="assistant", tool_calls=(_call("c1", "transfer_to_billing", {}),))
    a2 = Message(role="assistant", tool_calls=(_call("c2", "refund", {"order": "42"}),))
    t2 = Message(role="tool", tool_call_id="c2", name="refund", content='{"refunded": true}')
    a3 = Message(role="assistant", content="Refunded order 42.")
    u2 = Message(role="user", content="Thanks, bye.")
    a4 = Message(role="assistant", content="Goodbye!")
    billing_history = (u1,)
    calls = [
        RecordedCall(system=TRIAGE, input=(u1,), output=(a1,), tools=(TRANSFER,)),
        RecordedCall(system=BILLING, input=billing_history, output=(a2,), tools=(REFUND,)),
        RecordedCall(system=BILLING, input=(*billing_history, a2, t2), output=(a3,), tools=(REFUND,)),
        RecordedCall(system=BILLING, input=(*billing_history, a2, t2, a3, u2), output=(a4,), tools=(REFUND,)),
    ]
    messages, contexts = assemble(calls)
    return Conversation(id="switch", messages=messages, calls=contexts, tools=(TRANSFER,))


def test_assembled_calls_keep_each_calls_system_tools_and_history() -> None:
    conv = _skill_switch()
    assert [m.role for m in conv.messages] == ["system", "user", "assistant", "assistant", "tool", "assistant", "user",
                                               "assistant"]  # fmt: skip
    assert [(c.system, [t.name for t in c.tools or ()]) for c in conv.calls] == [
        (TRIAGE, ["transfer_to_billing"]),
        (BILLING, ["refund"]),
        (BILLING, ["refund"]),
        (BILLING, ["refund"]),
    ]
    assert conv.calls[0].input is None  # the first call sent the log as it is
    assert conv.calls[1].input is not None
    assert len(conv.calls[1].input) == 1


def test_each_turn_gets_the_context_of_its_own_call() -> None:
    conv = _skill_switch()
    points = list(replay_points(conv))
    assert count_turns(conv) == len(points) == 3  # the hand-off splits the first user turn at the switch
    triage, billing, bye = points
    assert [t.name for t in triage.tools] == ["transfer_to_billing"]
    assert triage.context[0].content == TRIAGE
    assert triage.recorded.tool_calls[0].name == "transfer_to_billing"
    assert triage.recorded.final_text is None
    assert [t.name for t in billing.tools] == ["refund"]
    assert [m.role for m in billing.context] == ["system", "user"]
    assert billing.context[0].content == BILLING
    assert billing.recorded.tool_calls[0].name == "refund"
    assert billing.recorded.final_text == "Refunded order 42."
    assert [t.name for t in bye.tools] == ["refund"]
    assert bye.context[-1].content == "Thanks, bye."
    assert bye.context[0].content == BILLING


def test_a_plain_log_keeps_its_turns_and_shared_history(tau_conversations: list[Conversation]) -> None:
    conv = tau_conversations[0]
    points = list(replay_points(conv))
    assert all(p.tools == conv.tools for p in points)
    assert all(type(p.context).__name__ == "History" for p in points)


def test_a_trace_whose_calls_send_the_whole_history_replays_like_the_log(
    tau_conversations: list[Conversation],
) -> None:
    conv = tau_conversations[0]
    last = max(i for i, m in enumerate(conv.messages) if m.role == "assistant")
    conv = conv.model_copy(update={"messages": conv.messages[: last + 1]})  # what a trace has: what was sent
    calls = []
    for i, m in enumerate(conv.messages):
        if m.role == "assistant":
            calls.append(RecordedCall(input=conv.messages[:i], output=(m,), tools=conv.tools))
    messages, contexts = assemble(calls)
    assert messages == conv.messages
    traced = conv.model_copy(update={"calls": contexts})
    plain = [(p.pair_id, tuple(p.context), p.tools, p.recorded) for p in replay_points(conv)]
    assert [(p.pair_id, tuple(p.context), p.tools, p.recorded) for p in replay_points(traced)] == plain


def test_the_late_tool_is_called_with_the_tools_it_had_then(tmp_path: Path) -> None:
    conv = _skill_switch()
    result = de.run(
        conversations=[conv],
        baseline=de.Variant(model="simulated:a"),
        candidate=de.Variant(model="simulated:b"),
        out=tmp_path / "run",
    )
    assert result.status == "completed"
    assert result.counts.errors == 0
    rows = (
        result.connect()
        .execute(
            "SELECT turn_index, side, matches_recorded, tool_call_problems FROM replays "
            "WHERE side <> 'recorded' ORDER BY turn_index, side"
        )
        .fetchall()
    )
    assert len(rows) == 6
    assert all(matches and problems == [] for _, _, matches, problems in rows)  # refund is no "no such tool"
    stored = result.connect().execute("SELECT calls FROM conversations").fetchone()[0]
    assert [c["system"] for c in json.loads(stored)] == [TRIAGE, BILLING, BILLING, BILLING]


def test_calls_must_point_at_the_assistants_answers_in_order() -> None:
    msgs = (Message(role="user", content="hi"), Message(role="assistant", content="hello"))
    with pytest.raises(ValueError, match="not the assistant's answer"):
        Conversation(id="c", messages=msgs, calls=(CallContext(message_index=0),))
    with pytest.raises(ValueError, match="out of order"):
        Conversation(id="c", messages=msgs, calls=(CallContext(message_index=1), CallContext(message_index=1)))


_texts = st.text(alphabet="abc ", min_size=1, max_size=6)


@given(st.lists(st.tuples(_texts, _texts), min_size=1, max_size=6), st.booleans())
def test_assembling_whole_history_calls_gives_back_the_conversation(
    turns: list[tuple[str, str]], with_system: bool
) -> None:
    messages: list[Message] = [Message(role="system", content="sys")] if with_system else []
    calls = []
    for user, answer in turns:
        messages.append(Message(role="user", content=user))
        reply = Message(role="assistant", content=answer)
        calls.append(RecordedCall(input=tuple(messages), output=(reply,)))
        messages.append(reply)
    assembled, contexts = assemble(calls)
    assert assembled == tuple(messages)
    assert [c.message_index for c in contexts] == [i for i, m in enumerate(messages) if m.role == "assistant"]
    assert all(c.input is None for c in contexts)
