from __future__ import annotations

import pytest
from pydantic import ValidationError

import delta_eval as de
from delta_eval.exceptions import RecordError
from delta_eval.replay.points import replay_points
from delta_eval.replay.render import RenderInput, build_request, fill_template
from delta_eval.schema import Message, ToolSpec
from tests.conftest import tool_turn_conversation


def point() -> de.ReplayPoint:
    return list(replay_points(tool_turn_conversation()))[1]


def test_recorded_context_is_sent_unchanged_by_default() -> None:
    p = point()
    req = build_request(p, de.Variant(model="simulated:x", params={"temperature": 0.2}))
    assert req.messages == p.context
    assert req.params.temperature == 0.2
    # the recorded answer never enters the prompt
    assert all(m.content != p.recorded.final_text for m in req.messages)


def test_system_prompt_template_is_filled_from_metadata() -> None:
    v = de.Variant(model="simulated:x", system_prompt='Tier {{tier}}. {{ recorded_system_prompt }} JSON: {"a": 1}')
    req = build_request(point(), v)
    assert req.messages[0] == Message(
        role="system", content='Tier gold. You are an airline agent. Today is 2024-05-15. JSON: {"a": 1}'
    )
    assert req.messages[1:] == point().context[1:]


def test_missing_template_variable_names_conversation_and_field() -> None:
    v = de.Variant(model="simulated:x", name="candidate", system_prompt="Hello {{customer.name}}")
    with pytest.raises(RecordError) as info:
        build_request(point(), v, source="export.jsonl")
    assert info.value.field == "metadata.customer.name"
    assert "conversation c1, turn 1" in info.value.record
    assert "{{customer.name}}" in info.value.reason


def test_tools_replaced_and_render_function_applied() -> None:
    seen: list[RenderInput] = []

    def render(inp: RenderInput) -> list[dict[str, str]]:
        seen.append(inp)
        return [
            {"role": "system", "content": f"rendered for {inp.metadata['tier']}"},
            *({"role": m.role, "content": m.content or ""} for m in inp.messages if m.role == "user"),
        ]

    v = de.Variant(model="simulated:x", tools=[{"name": "only_tool"}], render=render)
    req = build_request(point(), v)
    assert [t.name for t in req.tools] == ["only_tool"]
    assert seen[0].tools == (ToolSpec(name="only_tool"),)
    assert [m.role for m in req.messages] == ["system", "user", "user"]
    assert req.messages[0].content == "rendered for gold"


def test_render_by_import_path_and_failures_become_record_errors() -> None:
    v = de.Variant(model="simulated:x", render="json:dumps")  # returns a string: not a message list
    with pytest.raises(RecordError, match="render function failed"):
        build_request(point(), v)
    with pytest.raises(ValidationError, match="cannot import 'no_such_module'"):
        de.Variant(model="simulated:x", render="no_such_module:fn")


def test_fill_template_leaves_single_braces() -> None:
    assert fill_template("{x} {{x}}", {"x": 1}, None) == "{x} 1"
    with pytest.raises(KeyError):
        fill_template("{{y}}", {}, None)


def test_a_render_function_mixing_messages_and_dicts_keeps_their_media() -> None:
    image = de.MediaPart.from_bytes("image", b"\x89PNG", "image/png")

    def render(inp: RenderInput) -> list[object]:
        users = [m.model_copy(update={"media": (image,)}) for m in inp.messages if m.role == "user"]
        return [{"role": "system", "content": "rendered"}, *users]

    req = build_request(point(), de.Variant(model="simulated:x", render=render))
    assert [m.media for m in req.messages] == [(), (image,), (image,)]
