"""Grouping a trace's model calls into conversations: interleaved, out of order, bounded in memory, never silent."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from delta_eval.exceptions import RecordError
from delta_eval.ingest import traces
from delta_eval.ingest.model_calls import RecordedCall
from delta_eval.ingest.traces import TracedCall, TraceFormat, conversations_of, read_traces
from delta_eval.mapping import FieldMapping
from delta_eval.schema import Conversation, Message


def _calls(conversation: str, turns: int) -> list[TracedCall]:
    """A conversation of ``turns`` user/assistant exchanges, one call per answer sending the whole history."""
    history: list[Message] = []
    out = []
    for t in range(turns):
        history.append(Message(role="user", content=f"{conversation} question {t}"))
        answer = Message(role="assistant", content=f"{conversation} answer {t}")
        call = RecordedCall(input=tuple(history), output=(answer,), system=f"agent of {conversation}")
        out.append(TracedCall(conversation, (t,), f"line {t} of {conversation}", call, {"user": conversation}))
        history.append(answer)
    return out


def _interleave(groups: list[list[TracedCall]], seed: int) -> list[TracedCall]:
    rng = random.Random(seed)
    queues = [list(g) for g in groups]
    out = []
    while any(queues):
        q = rng.choice([q for q in queues if q])
        out.append(q.pop(0))
    return out


@settings(deadline=None, max_examples=40)
@given(st.lists(st.integers(1, 5), min_size=1, max_size=6), st.integers(0, 10**6), st.booleans())
def test_interleaved_calls_make_each_conversation_whole(sizes: list[int], seed: int, shuffled: bool) -> None:
    groups = [_calls(f"c{i}", n) for i, n in enumerate(sizes)]
    stream = _interleave(groups, seed)
    if shuffled:  # spans end out of order within a batch: the order key sorts them
        random.Random(seed).shuffle(stream)
    got = {c.id: c for _, c in conversations_of(stream, FieldMapping(metadata=["user"]), "x")}
    assert sorted(got) == sorted(f"c{i}" for i in range(len(sizes)))
    for i, n in enumerate(sizes):
        conv = got[f"c{i}"]
        assert isinstance(conv, Conversation)
        assert [m.content for m in conv.messages[1:]] == [
            text for t in range(n) for text in (f"c{i} question {t}", f"c{i} answer {t}")
        ]
        assert conv.metadata == {"user": f"c{i}"}
        assert conv.record.startswith(f"line 0 of c{i} ({n} call")


def test_a_conversation_idle_for_a_window_is_given_and_a_late_call_is_an_error() -> None:
    a, b = _calls("a", 3), _calls("b", 6)
    stream = [a[0], a[1], *b[:5], a[2], b[5]]
    out = list(conversations_of(stream, FieldMapping(), "x.jsonl", window=4))
    assert isinstance(out[0][1], Conversation)
    assert out[0][1].id == "a"
    assert len(out[0][1].messages) == 5  # given after 4 calls without one: 2 of its 3 calls
    late = out[1][1]
    assert isinstance(late, RecordError)
    assert late.record == "line 2 of a"
    assert "comes more than 4 calls after its last one" in late.reason
    assert [c.id for _, c in out[2:] if isinstance(c, Conversation)] == ["b"]


def test_conversations_are_given_as_the_source_is_read_not_at_its_end() -> None:
    consumed = 0

    def stream() -> Iterator[TracedCall]:
        nonlocal consumed
        for i in range(200):
            for call in _calls(f"c{i}", 2):
                consumed += 1
                yield call

    lag = []
    for _, conv in conversations_of(stream(), FieldMapping(), "x", window=10):
        assert isinstance(conv, Conversation)
        lag.append(consumed - 2 * (int(conv.id[1:]) + 1))  # calls read past the conversation's last one
    assert len(lag) == 200
    assert max(lag[:-10]) <= 10  # held for at most a window of calls: memory flat in the source's size


def test_a_source_without_a_model_call_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    nothing = TraceFormat(calls=lambda records, source: (c for c in records if False), looks_like=lambda r: False)
    monkeypatch.setattr(traces, "trace_format", lambda name: nothing)
    out = list(read_traces("otel", [("line 1", {}), ("line 2", {})], FieldMapping(), "spans.jsonl"))
    assert len(out) == 1
    error = out[0][1]
    assert isinstance(error, RecordError)
    assert error.reason == "none of its 2 records holds a model call in the 'otel' trace format"
