from __future__ import annotations

import base64

from hypothesis import given, settings
from hypothesis import strategies as st

from delta_eval.schema import MediaKind, MediaPart, Step, ToolCall, TurnOutput, Usage


def test_tool_call_parses_on_demand_and_copies_do_not_keep_stale_arguments() -> None:
    call = ToolCall(id="1", name="f", arguments='{"a": 1}')
    assert call.parsed_arguments == {"a": 1}
    changed = call.model_copy(update={"arguments": '{"a": 2}'})
    assert changed.parsed_arguments == {"a": 2}
    assert call.parsed_arguments == {"a": 1}


def test_empty_arguments_are_an_empty_object() -> None:
    call = ToolCall(id="1", name="f", arguments="  ")
    assert call.arguments_valid
    assert call.parsed_arguments == {}


def test_usage_adds_field_by_field() -> None:
    total = Usage(input_tokens=10, cached_input_tokens=4, output_tokens=3, reasoning_tokens=1) + Usage(
        input_tokens=1, output_tokens=2
    )
    assert total == Usage(input_tokens=11, cached_input_tokens=4, output_tokens=5, reasoning_tokens=1)


def test_turn_output_flattens_calls_and_texts() -> None:
    a = ToolCall(id="1", name="a")
    b = ToolCall(id="2", name="b")
    out = TurnOutput(steps=(Step(text="looking", tool_calls=(a,)), Step(tool_calls=(b,))), final_text="done")
    assert [c.name for c in out.tool_calls] == ["a", "b"]
    assert out.texts == ("looking", "done")


@settings(max_examples=50, deadline=None)
@given(raw=st.binary(min_size=1, max_size=300), media_type=st.sampled_from(["image/png", "audio/wav", "text/plain"]))
def test_a_media_part_is_named_by_its_bytes_however_it_is_given(raw: bytes, media_type: str) -> None:
    data = base64.b64encode(raw).decode()
    kind: MediaKind = (
        "image" if media_type.startswith("image/") else "audio" if media_type.startswith("audio/") else "file"
    )
    given_ways = (
        MediaPart.from_bytes(kind, raw, media_type),
        MediaPart.from_base64(kind, data, media_type),
        MediaPart.from_url(kind, f"data:{media_type};base64,{data}"),
    )
    assert len(set(given_ways)) == 1
    part = given_ways[0]
    assert part.data_url == f"data:{media_type};base64,{data}"
    assert part.placeholder == f"[{kind} {media_type} sha256:{part.sha256[:12]}]"
    assert data not in part.placeholder
