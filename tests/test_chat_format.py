from __future__ import annotations

from typing import Any

import pytest

from delta_eval.chat_format import parse_messages, parse_tools
from delta_eval.exceptions import RecordError


def call(call_id: str, name: str = "f", arguments: Any = "{}") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def test_tool_round_trip_is_parsed_in_order() -> None:
    msgs = parse_messages(
        [
            {"role": "system", "content": "policy"},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "let me look", "tool_calls": [call("a", "lookup", '{"x": 1}')]},
            {"role": "tool", "tool_call_id": "a", "content": "42"},
            {"role": "assistant", "content": "it is 42"},
        ]
    )
    assert [m.role for m in msgs] == ["system", "user", "assistant", "tool", "assistant"]
    assert msgs[2].content == "let me look"
    assert msgs[2].tool_calls[0].parsed_arguments == {"x": 1}
    assert msgs[3].name == "lookup"  # taken from the call it answers


def test_reused_call_ids_answer_the_latest_open_call() -> None:
    # tau-bench reuses ids across rounds; each result answers the call just made.
    msgs = parse_messages(
        [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": None, "tool_calls": [call("same", "first")]},
            {"role": "tool", "tool_call_id": "same", "content": "1"},
            {"role": "assistant", "content": None, "tool_calls": [call("same", "second")]},
            {"role": "tool", "tool_call_id": "same", "content": "2"},
            {"role": "assistant", "content": "done"},
        ]
    )
    assert [m.name for m in msgs if m.role == "tool"] == ["first", "second"]


def test_text_parts_and_object_arguments_are_accepted() -> None:
    msgs = parse_messages(
        [
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            {"role": "assistant", "tool_calls": [call("c", arguments={"k": "v"})]},
            {"role": "tool", "tool_call_id": "c", "content": "ok"},
        ]
    )
    assert msgs[0].content == "ab"
    assert msgs[1].tool_calls[0].parsed_arguments == {"k": "v"}


def test_invalid_argument_json_is_kept_raw_and_flagged() -> None:
    msgs = parse_messages(
        [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "tool_calls": [call("c", arguments='{"k": ')]},
            {"role": "tool", "tool_call_id": "c", "content": "ok"},
        ]
    )
    tc = msgs[1].tool_calls[0]
    assert tc.arguments == '{"k": '
    assert not tc.arguments_valid
    assert tc.parsed_arguments is None


@pytest.mark.parametrize(
    ("messages", "field", "reason"),
    [
        ([{"role": "bot", "content": "x"}], "messages[0].role", "unknown role 'bot'"),
        (
            [{"role": "user", "content": "x"}, {"role": "tool", "tool_call_id": "z", "content": "r"}],
            "messages[1].tool_call_id",
            "answers no open tool call",
        ),
        (
            [
                {"role": "user", "content": "x"},
                {"role": "assistant", "tool_calls": [call("a")]},
                {"role": "user", "content": "y"},
            ],
            "messages[1].tool_calls[0]",
            "has no result",
        ),
        (
            [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [call("a")]}],
            "messages[1].tool_calls[0]",
            "has no result",
        ),
        (
            [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}],
            "messages[0].content[0].image_url.url",
            "needs its url",
        ),
        (
            [{"role": "system", "content": [{"type": "image_url", "image_url": {"url": "https://x.test/a.png"}}]}],
            "messages[0].content[0]",
            "media only in user and tool messages",
        ),
        (
            [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,%"}}]}],
            "messages[0].content[0].image_url",
            "not valid base64",
        ),
        ([{"role": "assistant", "content": None}], "messages[0].content", "needs content or tool calls"),
        (
            [{"role": "assistant", "tool_calls": [{"id": "a", "function": {"arguments": "{}"}}]}],
            "messages[0].tool_calls[0].function.name",
            "missing tool name",
        ),
        ([], "messages", "no messages"),
        ("not a list", "messages", "expected a list"),
    ],
)
def test_bad_records_name_source_record_and_field(messages: Any, field: str, reason: str) -> None:
    with pytest.raises(RecordError) as info:
        parse_messages(messages, source="export.jsonl", record="line 7")
    err = info.value
    assert (err.source, err.record, err.field) == ("export.jsonl", "line 7", field)
    assert reason in err.reason
    assert str(err).startswith(f"export.jsonl, line 7, field {field}: ")


def test_tool_specs_in_openai_and_bare_form() -> None:
    specs = parse_tools(
        [
            {"type": "function", "function": {"name": "a", "description": "A", "parameters": {"type": "object"}}},
            {"name": "b"},
        ]
    )
    assert [s.name for s in specs] == ["a", "b"]
    assert specs[0].description == "A"
    assert specs[1].parameters == {"type": "object", "properties": {}}
    with pytest.raises(RecordError, match=r"tools\[0\]"):
        parse_tools([{"description": "no name"}])
