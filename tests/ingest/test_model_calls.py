"""A reader's drafted messages become models equal in every way to the models validated from the same fields."""

from __future__ import annotations

import pickle

from hypothesis import given
from hypothesis import strategies as st

from delta_eval.ingest.model_calls import draft, message_of
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
