"""The canonical call types: typed parameters, and a response-cache key that survives new optional fields."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

import delta_eval as de
from delta_eval.calls import CACHE_KEY_VERSION, GenerateParams, ModelRequest, NamedToolChoice, ResponseFormat
from delta_eval.schema import Message, ToolCall, ToolSpec

REQUEST = ModelRequest(
    model="openai:gpt-4.1-mini",
    messages=(
        Message(role="system", content="You are an airline agent."),
        Message(role="user", content="Cancel ABC123"),
        Message(role="assistant", tool_calls=(ToolCall(id="c1", name="cancel", arguments='{"id": "ABC123"}'),)),
        Message(role="tool", tool_call_id="c1", name="cancel", content="ok"),
    ),
    tools=(ToolSpec(name="cancel", parameters={"type": "object", "properties": {"id": {"type": "string"}}}),),
    params=GenerateParams(temperature=0.2),
)

#: The key of REQUEST for the namespace and identity below, as CACHE_KEY_VERSION 1 computes it.
PINNED_KEY = "3d137ebd432040e9509cf4045a35c282be48fc363eb212aa8b691d12bdc52119"

# The same request as a later version of the library would build it, with a new optional field on the request, on
# its parameters and on its messages, each left at its default.


class LaterParams(GenerateParams):
    frequency_penalty: float | None = None


class LaterMessage(Message):
    cache_control: dict[str, Any] | None = None


class LaterRequest(ModelRequest):
    params: LaterParams = LaterParams()
    messages: tuple[LaterMessage, ...]  # type: ignore[assignment]
    service_tier: str | None = None


def later(request: ModelRequest, **changes: Any) -> LaterRequest:
    data = request.model_dump()
    data.update(changes)
    return LaterRequest.model_validate(data)


def test_a_new_defaulted_field_leaves_the_cache_key_unchanged() -> None:
    again = later(REQUEST)
    assert isinstance(again.params, LaterParams)
    assert isinstance(again.messages[0], LaterMessage)
    assert again.cache_key() == REQUEST.cache_key()
    assert again.cache_key(namespace="candidate:c#0", identity={"base_url": "http://x"}) == REQUEST.cache_key(
        namespace="candidate:c#0", identity={"base_url": "http://x"}
    )
    # only setting the new field makes a new key
    assert later(REQUEST, service_tier="flex").cache_key() != REQUEST.cache_key()
    params = {**REQUEST.params.model_dump(), "frequency_penalty": 0.5}
    assert later(REQUEST, params=params).cache_key() != REQUEST.cache_key()


def test_the_key_of_a_fixed_request_never_changes_unless_the_version_does() -> None:
    # If this fails, every cached answer of every user would be lost: bump CACHE_KEY_VERSION on purpose instead.
    assert REQUEST.cache_key(namespace="candidate:c#0", identity={"base_url": "http://x"}) == (
        PINNED_KEY if CACHE_KEY_VERSION == 1 else "bump PINNED_KEY with the version"
    )
    assert json.loads(REQUEST.model_dump_json(exclude_defaults=True)) == REQUEST.canonical()


def test_the_key_is_a_versioned_hash_of_the_canonical_form() -> None:
    canonical = REQUEST.canonical()
    assert "params" in canonical
    assert canonical["params"] == {"temperature": 0.2}  # defaults left out
    assert "tool_calls" not in canonical["messages"][0]
    assert CACHE_KEY_VERSION == 1
    # a value set to its default is the same request as one left unset
    assert REQUEST.model_copy(update={"params": GenerateParams(temperature=0.2, seed=None)}).cache_key() == (
        REQUEST.cache_key()
    )


_text = st.text(max_size=20)


@given(
    temperature=st.none() | st.floats(0, 2, allow_nan=False),
    seed=st.none() | st.integers(-(2**31), 2**31),
    content=_text,
    namespace=_text,
)
def test_keys_differ_exactly_when_what_decides_the_answer_differs(
    temperature: float | None, seed: int | None, content: str, namespace: str
) -> None:
    base = ModelRequest(model="m:x", messages=(Message(role="user", content=content),))
    changed = base.model_copy(update={"params": GenerateParams(temperature=temperature, seed=seed)})
    same_params = temperature is None and seed is None
    assert (changed.cache_key(namespace=namespace) == base.cache_key(namespace=namespace)) is same_params
    assert base.cache_key(namespace=namespace) != base.cache_key(namespace=namespace + "!")
    assert later(changed).cache_key(namespace=namespace) == changed.cache_key(namespace=namespace)


def test_typed_parameters_for_real_providers() -> None:
    params = GenerateParams.model_validate(
        {
            "tool_choice": {"name": "cancel"},
            "parallel_tool_calls": False,
            "reasoning_effort": "low",
            "response_format": {"name": "verdict", "json_schema": {"type": "object"}},
        }
    )
    assert params.tool_choice == NamedToolChoice(name="cancel")
    assert GenerateParams(tool_choice="required").tool_choice == "required"
    assert params.response_format is not None
    assert params.response_format.type == "json_schema"
    with pytest.raises(ValidationError):
        GenerateParams(tool_choice="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        GenerateParams(reasoning_effort="extreme")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="json_schema"):
        ResponseFormat(type="json_schema")
    with pytest.raises(ValidationError, match="json_schema"):
        ResponseFormat(type="json_object", json_schema={"type": "object"})

    class Verdict(BaseModel):
        winner: str

    fmt = ResponseFormat.from_model(Verdict)
    assert fmt.name == "Verdict"
    assert fmt.json_schema is not None
    assert fmt.json_schema["properties"]["winner"]["type"] == "string"


def test_variant_params_from_a_config_table() -> None:
    variant = de.Variant.model_validate(
        {"model": "openai:gpt-4.1", "params": {"tool_choice": "none", "max_tokens": 512, "stop": ["END"]}}
    )
    assert variant.params.tool_choice == "none"
    assert variant.params.stop == ("END",)
    with pytest.raises(ValidationError):
        de.Variant.model_validate({"model": "openai:gpt-4.1", "params": {"max_tokens": 0}})
