"""Grouping a trace's model calls into conversations: interleaved, out of order, bounded in memory, never silent."""

from __future__ import annotations

import random

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
        fields = {"user": conversation, "turn": t}  # only the first call's are read
        out.append(TracedCall(conversation, (t,), f"line {t} of {conversation}", call, fields))
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
    got = {c.id: c for _, c in conversations_of(stream, FieldMapping(metadata=["user", "turn"]), "x")}
    assert sorted(got) == sorted(f"c{i}" for i in range(len(sizes)))
    for i, n in enumerate(sizes):
        conv = got[f"c{i}"]
        assert isinstance(conv, Conversation)
        assert [m.content for m in conv.messages[1:]] == [
            text for t in range(n) for text in (f"c{i} question {t}", f"c{i} answer {t}")
        ]
        assert conv.metadata == {"user": f"c{i}", "turn": 0}  # the first call's, in whatever order calls came
        assert conv.record.startswith(f"line 0 of c{i} ({n} call")


@settings(deadline=None, max_examples=20)
@given(st.lists(st.integers(1, 5), min_size=1, max_size=8), st.integers(0, 10**6), st.integers(1, 6))
def test_calls_past_the_memory_bound_make_the_same_conversations(sizes: list[int], seed: int, held: int) -> None:
    stream = _interleave([_calls(f"c{i}", n) for i, n in enumerate(sizes)], seed)
    random.Random(seed).shuffle(stream)  # a late call of a conversation already sent to the file joins it
    mapping = FieldMapping(metadata=["user", "turn"])
    in_memory = list(conversations_of(stream, mapping, "x"))
    bounded = list(conversations_of(stream, mapping, "x", max_held=held))
    assert bounded == in_memory
    assert len(in_memory) == len(sizes)


def test_a_source_without_a_model_call_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    nothing = TraceFormat(calls=lambda records, source: (c for c in records if False), looks_like=lambda r: False)
    monkeypatch.setattr(traces, "trace_format", lambda name: nothing)
    out = list(read_traces("otel", [("line 1", {}), ("line 2", {})], FieldMapping(), "spans.jsonl"))
    assert len(out) == 1
    error = out[0][1]
    assert isinstance(error, RecordError)
    assert error.reason == "none of its 2 records holds a model call in the 'otel' trace format"
