"""Grouping a trace's model calls into conversations: interleaved, out of order, bounded in memory, never silent."""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from delta_eval.exceptions import RecordError
from delta_eval.ingest import traces
from delta_eval.ingest.model_calls import RecordedCall
from delta_eval.ingest.traces import TracedCall, TraceFormat, conversations_of, read_traces
from delta_eval.mapping import FieldMapping
from delta_eval.schema import Conversation, Message, ReasoningState, ToolSpec


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


class _Reduced(dict):  # type: ignore[type-arg]
    """Fields that reduce themselves, as a reader's lazy fields do."""

    def __reduce__(self) -> tuple[object, ...]:
        return _Reduced, (dict(self),)


class _Other(Mapping[str, Any]):
    """Fields of another kind: pickled as any object is."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.values = values

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.values)

    def __len__(self) -> int:
        return len(self.values)


_plain = st.text(max_size=8)
_drafted = st.tuples(st.sampled_from(["user", "assistant", "tool"]), st.none() | _plain,
                     st.lists(st.tuples(_plain, _plain, _plain), max_size=2).map(tuple), st.none() | _plain,
                     st.none() | _plain, st.none())  # fmt: skip
_tools = st.none() | st.lists(st.builds(ToolSpec, name=_plain.filter(bool), description=_plain), max_size=2).map(tuple)
_fields = st.dictionaries(_plain, st.none() | st.integers() | _plain, max_size=3)


@settings(deadline=None, max_examples=60)
@given(st.lists(st.tuples(st.lists(_drafted, max_size=4), _tools, _fields, st.integers(0, 2)), min_size=1, max_size=4),
       st.booleans(), st.booleans())  # fmt: skip
def test_a_spilled_conversation_is_read_back_as_it_was(
    specs: list[tuple[list[Any], Any, dict[str, Any], int]], with_model: bool, with_reasoning: bool
) -> None:
    """A conversation's calls come back from the spill's file equal to what went in, drafted messages and tools
    shared between calls as they were, whether they had a plain form (marshalled) or not (pickled: a message that
    is a model, a draft with reasoning state, fields that are neither a dict nor reduce themselves)."""
    history: list[Any] = []
    calls = []
    for i, (new, tools, fields, kind) in enumerate(specs):
        history = history + [tuple(m) for m in new]
        if with_model and i == 0:
            history.append(Message(role="user", content="a model, not a draft"))
        if with_reasoning and i == len(specs) - 1:
            history.append(("assistant", "hm", (), None, None, ReasoningState(provider="x", summary="why")))
        held: Any = [dict(fields), _Reduced(fields), _Other(dict(fields))][kind]
        answer = ("assistant", f"answer {i}", (), None, None, None)
        call = RecordedCall(input=tuple(history), output=(answer,), system=f"s{i}", tools=tools)
        calls.append(TracedCall("conv", (i, i), f"span {i}", call, held))
        history.append(answer)
    spill = traces._Spill()
    try:
        data = spill.pack(calls)
        back = spill.unpack(data)
    finally:
        spill.close()
    plain = not with_model and not with_reasoning and all(k != 2 for *_, k in specs)
    assert data[:1] == (b"m" if plain else b"p")
    assert [(c.conversation, c.order, c.label, c.call, dict(c.fields)) for c in back] == [
        (c.conversation, c.order, c.label, c.call, dict(c.fields)) for c in calls
    ]
    assert [type(c.fields) for c in back] == [type(c.fields) for c in calls]
    for after in back[1:]:  # what a call re-sends is the same object as in the earlier call
        if back[0].call.input:
            assert after.call.input[0] is back[0].call.input[0]
    if plain and len(back) > 1 and calls[0].call.tools is not None and calls[1].call.tools is calls[0].call.tools:
        assert back[1].call.tools is back[0].call.tools
