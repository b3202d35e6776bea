from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import delta_eval as de
from delta_eval.replay.points import count_turns, replay_points, select_turns
from delta_eval.schema import Conversation, History, Message, ReplayPoint, ToolCall
from tests.conftest import tool_turn_conversation


def test_a_turn_runs_until_the_assistant_speaks_in_plain_text() -> None:
    conv = tool_turn_conversation()
    points = list(replay_points(conv))
    assert [p.pair_id for p in points] == ["c1#0", "c1#1"]
    first = points[0]
    assert first.context == conv.messages[:2]
    assert [c.name for c in first.recorded.tool_calls] == ["get_reservation"]
    assert first.recorded.steps[0].tool_results[0].content == '{"flight": "HAT001"}'
    assert first.recorded.final_text == "Your reservation ABC123 is on flight HAT001."
    assert points[1].context == conv.messages[:6]
    assert points[1].recorded.final_text == "You're welcome."


def test_tau_bench_points_cover_every_assistant_message(tau_conversations: list[de.Conversation]) -> None:
    n_points = n_messages = n_no_text = 0
    for conv in tau_conversations:
        for p in replay_points(conv):
            n_points += 1
            # context is exactly the recorded prefix, never the answer
            assert conv.messages[: p.message_index] == p.context
            assert conv.messages[p.message_index].role == "assistant"
            n_messages += len(p.recorded.steps) + (p.recorded.final_text is not None)
            n_no_text += p.recorded.final_text is None
    assert n_messages == 2454
    assert 1200 < n_points < 1500
    # 51 conversations end on a tool result: those turns have no final text
    assert n_no_text >= 51


def test_select_turns_is_seeded_and_keeps_order(tau_conversations: list[de.Conversation]) -> None:
    points = list(replay_points(tau_conversations[0]))
    picked = select_turns(points, 3, seed=1)
    assert len(picked) == 3
    assert picked == select_turns(points, 3, seed=1)
    assert [p.turn_index for p in picked] == sorted(p.turn_index for p in picked)
    assert select_turns(points, None, seed=1) == points


@given(st.lists(st.sampled_from(["user", "assistant"]), max_size=30), st.integers(-5, 40), st.data())
def test_a_history_is_the_tuple_slice_it_stands_for(roles: list[str], stop: int, data: st.DataObject) -> None:
    messages = tuple(Message(role=r, content=f"m{k}") for k, r in enumerate(roles))  # type: ignore[arg-type]
    history, expected = History(messages, stop), messages[: max(0, stop)]
    assert len(history) == len(expected)
    assert tuple(history) == expected
    assert tuple(reversed(history)) == tuple(reversed(expected))
    assert history == expected
    assert history == History((*messages, Message(role="user", content="later")), len(expected))
    index = data.draw(st.integers(-len(expected) - 2, len(expected) + 2))
    if -len(expected) <= index < len(expected):
        assert history[index] is expected[index]
    else:
        with pytest.raises(IndexError):
            history[index]
    lo, hi = data.draw(st.integers(-3, 35)), data.draw(st.integers(-3, 35))
    assert history[lo:hi] == expected[lo:hi]


def test_points_share_the_conversations_messages(small_conversation: Conversation) -> None:
    points = list(replay_points(small_conversation))
    for p in points:
        assert isinstance(p.context, History)
        assert all(a is b for a, b in zip(p.context, small_conversation.messages, strict=False))
        assert tuple(p.context) == small_conversation.messages[: p.message_index]
    # a point built by hand is validated as before, its context a tuple
    again = ReplayPoint.model_validate(points[-1].model_dump())
    assert isinstance(again.context, tuple)
    assert again == points[-1]


def _ticket_run(conv_id: str = "t1", *, user_later: bool = False) -> Conversation:
    """An autonomous agent: a ticket in the system prompt, tool calls and their results, then a final text."""
    messages = [
        Message(role="system", content="You resolve tickets. Ticket #42: refund order 7 (damaged)."),
        Message(role="assistant", tool_calls=(ToolCall(id="a", name="get_order", arguments='{"id": 7}'),)),
        Message(role="tool", tool_call_id="a", name="get_order", content='{"status": "delivered"}'),
        Message(role="assistant", content="Refund issued for order 7; ticket #42 closed."),
    ]
    if user_later:
        messages += [Message(role="user", content="thanks"), Message(role="assistant", content="You're welcome.")]
    return Conversation(id=conv_id, messages=tuple(messages))


def test_an_autonomous_agents_first_turn_is_replayed() -> None:
    conv = _ticket_run()
    points = list(replay_points(conv))
    assert [p.pair_id for p in points] == ["t1#0"]
    assert [c.name for c in points[0].recorded.tool_calls] == ["get_order"]
    assert points[0].recorded.final_text == "Refund issued for order 7; ticket #42 closed."
    assert count_turns(conv) == count_turns(conv, greetings=True) == 1


def test_a_pre_user_turn_that_calls_tools_is_not_a_greeting() -> None:
    conv = _ticket_run(user_later=True)
    assert [p.pair_id for p in replay_points(conv)] == ["t1#0", "t1#1"]
    assert count_turns(conv) == 2


def test_plain_text_with_no_user_message_at_all_is_replayed() -> None:
    # an autonomous run that reports in text before it acts: every turn is the agent's, none a greeting
    conv = Conversation(
        id="a",
        messages=(
            Message(role="system", content="Ticket #9: check the nightly build."),
            Message(role="assistant", content="Looking at the build."),
            Message(role="assistant", tool_calls=(ToolCall(id="b", name="build_log", arguments="{}"),)),
            Message(role="tool", tool_call_id="b", name="build_log", content="ok"),
            Message(role="assistant", content="The build is green."),
        ),
    )
    assert [p.pair_id for p in replay_points(conv)] == ["a#0", "a#1"]
    assert count_turns(conv) == 2


def test_a_greeting_is_plain_text_before_a_user_who_speaks_later() -> None:
    conv = Conversation(
        id="g",
        messages=(
            Message(role="system", content="policy"),
            Message(role="assistant", content="Hi! How can I help?"),
            Message(role="user", content="hi"),
            Message(role="assistant", content="hello"),
        ),
    )
    # left out by default; turn numbers count it either way, so pair ids do not move
    assert [p.pair_id for p in replay_points(conv)] == ["g#1"]
    assert [p.pair_id for p in replay_points(conv, greetings=True)] == ["g#0", "g#1"]
    assert (count_turns(conv), count_turns(conv, greetings=True)) == (1, 2)
