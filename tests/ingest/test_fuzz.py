"""Any record, however malformed, becomes a conversation or a RecordError that names where it is: never a crash."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import delta_eval as de
from delta_eval.chat_format import parse_messages
from delta_eval.exceptions import RecordError
from delta_eval.mapping import FieldMapping

pytestmark = pytest.mark.slow

json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8)
json_values = st.recursive(
    json_scalars,
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4),
    max_leaves=20,
)
roles = st.sampled_from(["system", "user", "assistant", "tool", "developer", "function", "bot", None, 3])
call_ids = st.sampled_from(["a", "b", "c"])
tool_calls = st.lists(
    st.fixed_dictionaries(
        {
            "id": call_ids | json_scalars,
            "type": st.just("function"),
            "function": st.fixed_dictionaries(
                {"name": st.sampled_from(["f", "g"]) | json_scalars, "arguments": st.text(max_size=12) | json_values}
            ),
        }
    ),
    max_size=3,
)
messages = st.lists(
    st.fixed_dictionaries(
        {"role": roles},
        optional={
            "content": st.text(max_size=10) | json_values,
            "tool_calls": tool_calls | json_values,
            "tool_call_id": call_ids | json_scalars,
            "name": st.text(max_size=4),
        },
    ),
    max_size=8,
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(messages | json_values)
def test_parse_messages_raises_only_record_errors(raw: Any) -> None:
    try:
        parsed = parse_messages(raw, source="fuzz.jsonl", record="line 1")
    except RecordError as exc:
        error = exc
    else:
        error = None
    if error is not None:
        assert (error.source, error.record) == ("fuzz.jsonl", "line 1")
        assert error.field.startswith("messages")
        return
    # What parses is well formed: every tool result answers a call made before it.
    open_calls: set[str] = set()
    for m in parsed:
        if m.role == "assistant":
            open_calls |= {c.id for c in m.tool_calls}
        if m.role == "tool":
            assert m.tool_call_id in open_calls


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(["id", "messages", "tools", "meta", "x"]), json_values | messages, max_size=5))
def test_any_record_is_a_conversation_or_a_record_error(record: dict[str, Any]) -> None:
    mapping = FieldMapping(metadata={"m": "meta.x"})
    try:
        conv = mapping.to_conversation(record, source="fuzz.json", label="record 0")
    except RecordError as exc:
        error = exc
    else:
        error = None
        assert conv.messages
    if error is not None:
        assert error.source == "fuzz.json"
        assert error.record.startswith("record 0")


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.text(max_size=40) | json_values.map(json.dumps), min_size=1, max_size=8))
def test_jsonl_lines_of_anything(tmp_path: Path, lines: list[str]) -> None:
    path = tmp_path / "fuzz.jsonl"
    # One element, one line: text-mode reading also ends lines at a bare carriage return.
    one_per_line = (line.replace("\r", " ").replace("\n", " ") for line in lines)
    path.write_text("\n".join(one_per_line) + "\n", encoding="utf-8")
    items = list(de.read_conversations(path))
    assert all(isinstance(i, de.Conversation | RecordError) for i in items)
    assert len(items) <= len(lines)
