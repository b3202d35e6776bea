"""A reader's drafted messages become models equal in every way to the models validated from the same fields."""

from __future__ import annotations

import pickle
from random import Random

from hypothesis import given
from hypothesis import strategies as st

from delta_eval.ingest.model_calls import RecordedCall, assemble, draft, message_of
from delta_eval.schema import Message, ReasoningState, ToolCall

_text = st.text(max_size=12)
_calls = st.lists(st.tuples(_text.filter(bool), _text.filter(bool), _text), max_size=3).map(tuple)
_reasoning = st.none() | st.builds(ReasoningState, provider=st.just("openai"), model=_text, summary=_text)


@st.composite
def drafts(draw: st.DrawFn) -> tuple:  # type: ignore[type-arg]
    role = draw(st.sampled_from(["system", "user", "assistant", "tool"]))
    return draft(
        role,
        content=draw(st.none() | _text),
        tool_calls=draw(_calls) if role == "assistant" else (),
        tool_call_id=draw(st.none() | _text) if role == "tool" else None,
        name=draw(st.none() | _text),
        reasoning=draw(_reasoning) if role == "assistant" else None,
    )


@given(drafts())
def test_a_draft_becomes_the_model_validation_would_make(d: tuple) -> None:  # type: ignore[type-arg]
    role, content, calls, call_id, name, reasoning = d
    expected = Message(
        role=role,
        content=content,
        tool_calls=tuple(ToolCall(id=i, name=n, arguments=a) for i, n, a in calls),
        tool_call_id=call_id,
        name=name,
        reasoning=reasoning,
    )
    made = message_of(d)
    assert made == expected
    assert hash(made) == hash(expected)
    assert made.model_fields_set == expected.model_fields_set
    assert made.model_dump(exclude_unset=True) == expected.model_dump(exclude_unset=True)
    assert made.model_dump_json() == expected.model_dump_json()
    assert [c.model_fields_set for c in made.tool_calls] == [c.model_fields_set for c in expected.tool_calls]
    assert pickle.loads(pickle.dumps(made)) == expected
    # Each model has a set of its own: changing one (pydantic's model_copy does) leaves the others as they were.
    assert made.model_fields_set is not message_of(d).model_fields_set


@st.composite
def draft_calls(draw: st.DrawFn) -> list[RecordedCall]:
    """Calls of one conversation as a trace reader drafts them: each re-sends the history before it (the same draft
    objects, or copies read again: equal, or with other spacing), sometimes filtered or with system messages, then
    its answer."""
    history: list[tuple] = []  # type: ignore[type-arg]
    calls = []
    for _ in range(draw(st.integers(1, 4))):
        history += draw(st.lists(drafts().filter(lambda d: d[0] != "assistant"), min_size=0, max_size=2))
        sent = list(history)
        if sent and draw(st.booleans()):  # the message read again: another object, the same key
            i = draw(st.integers(0, len(sent) - 1))
            role, content, *rest = sent[i]
            sent[i] = (role, f" {content}" if content and draw(st.booleans()) else content, *rest)
        if sent and draw(st.integers(0, 4)) == 0:  # the history filtered after a hand-off
            del sent[draw(st.integers(0, len(sent) - 1))]
        answers = draw(st.lists(drafts(), max_size=2))
        system = draw(st.none() | _text)
        calls.append(RecordedCall(input=tuple(sent), output=tuple(answers), system=system))
        history += [a for a in answers if a[0] == "assistant"][:1]
    return calls


@given(draft_calls(), st.randoms())
def test_calls_of_drafts_assemble_as_the_calls_of_their_models(calls: list[RecordedCall], rnd: Random) -> None:
    """Drafts, models, or both mixed (a reader may make some messages models): the same conversation."""
    models: dict[int, Message] = {}
    mixed: dict[int, object] = {}

    def model(m: tuple) -> Message:  # type: ignore[type-arg]
        return models.setdefault(id(m), message_of(m))

    def either(m: tuple) -> object:  # type: ignore[type-arg]
        return mixed.setdefault(id(m), model(m) if rnd.random() < 0.5 else m)

    as_models = [RecordedCall(input=tuple(map(model, c.input)), output=tuple(map(model, c.output)), system=c.system)
                 for c in calls]  # fmt: skip
    as_mixed = [RecordedCall(input=tuple(map(either, c.input)), output=tuple(map(either, c.output)), system=c.system)
                for c in calls]  # type: ignore[arg-type]  # fmt: skip
    expected_messages, expected_contexts = assemble(as_models)
    for case in (calls, as_mixed):
        messages, contexts = assemble(case)
        assert messages == expected_messages
        assert contexts == expected_contexts
        assert [m.model_fields_set for m in messages] == [m.model_fields_set for m in expected_messages]
        assert [c.model_dump_json() for c in contexts] == [c.model_dump_json() for c in expected_contexts]
