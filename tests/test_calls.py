"""The canonical call types: typed parameters, and a response-cache key that survives new optional fields."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

import delta_eval as de
from delta_eval.calls import (
    CACHE_KEY_VERSION,
    GenerateParams,
    ModelRequest,
    NamedToolChoice,
    ResponseFormat,
    _head,
)
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

#: The key of REQUEST for the namespace and identity below, as CACHE_KEY_VERSION 2 computes it.
PINNED_KEY = "2455388a3b52bb9f865a461a5e3f823d15a17390228130acb790c75fafa01640"
#: The same, as version 1 computed it (caches written before version 2 are read with it).
PINNED_KEY_V1 = "3d137ebd432040e9509cf4045a35c282be48fc363eb212aa8b691d12bdc52119"

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
        PINNED_KEY if CACHE_KEY_VERSION == 2 else "bump PINNED_KEY with the version"
    )
    assert REQUEST.cache_key_v1(namespace="candidate:c#0", identity={"base_url": "http://x"}) == PINNED_KEY_V1
    assert json.loads(REQUEST.model_dump_json(exclude_defaults=True)) == REQUEST.canonical()


def test_the_key_is_a_versioned_hash_of_the_canonical_form() -> None:
    canonical = REQUEST.canonical()
    assert "params" in canonical
    assert canonical["params"] == {"temperature": 0.2}  # defaults left out
    assert "tool_calls" not in canonical["messages"][0]
    assert CACHE_KEY_VERSION == 2
    # a value set to its default is the same request as one left unset
    assert REQUEST.model_copy(update={"params": GenerateParams(temperature=0.2, seed=None)}).cache_key() == (
        REQUEST.cache_key()
    )


_text = st.text(max_size=20)


@given(
    namespace=st.text(max_size=30),
    identity=st.none() | st.dictionaries(st.text(max_size=8), st.text(max_size=12) | st.integers() | st.booleans()),
)
def test_the_keys_head_is_the_json_of_version_namespace_and_identity(
    namespace: str, identity: dict[str, Any] | None
) -> None:
    for _ in range(2):  # the second time from the kept identity
        expected = json.dumps([2, namespace, identity or {}], sort_keys=True, separators=(",", ":")).encode("utf-8")
        assert _head(2, namespace, identity) == expected + b"\x00"
    assert _head(2, namespace, {"a": "1"}) != _head(2, namespace, {"a": 1}) != _head(2, namespace, {"a": True})


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


def scratch_key(request: ModelRequest, namespace: str = "", identity: dict[str, Any] | None = None) -> str:
    """The version 2 key computed from the whole request, as the format defines it (no prefix reused)."""
    head = json.dumps([2, namespace, identity or {}], sort_keys=True, separators=(",", ":")).encode() + b"\x00"
    body = request.model_dump_json(exclude_defaults=True).encode()
    return hashlib.sha256(head + hashlib.sha256(body).digest()).hexdigest()


def scratch_key_v1(request: ModelRequest, namespace: str = "") -> str:
    head = json.dumps([1, namespace, {}], sort_keys=True, separators=(",", ":")).encode() + b"\x00"
    return hashlib.sha256(head + request.model_dump_json(exclude_defaults=True).encode()).hexdigest()


_messages = st.lists(
    st.builds(
        Message,
        role=st.sampled_from(["system", "user", "assistant", "tool"]),
        content=st.none() | st.text(max_size=8),
        tool_calls=st.lists(
            st.builds(ToolCall, id=st.text(max_size=3), name=st.sampled_from(["a", "b"]), arguments=st.just("{}")),
            max_size=1,
        ).map(tuple),
    ),
    min_size=1,
    max_size=12,
)


@given(messages=_messages, data=st.data())
def test_a_key_chained_on_an_earlier_prefix_is_the_key_computed_from_scratch(
    messages: list[Message], data: st.DataObject
) -> None:
    # The requests of one conversation, in any order (its turns run concurrently), some re-sent with an equal but
    # new first message (a variant's system prompt is built again for each turn) and under each turn's namespace.
    history = tuple(messages)
    ends = data.draw(st.lists(st.integers(0, len(history)), min_size=1, max_size=6))
    for k, end in enumerate(ends):
        sent = history[:end]
        if sent and data.draw(st.booleans()):
            sent = (sent[0].model_copy(), *sent[1:])
        request = ModelRequest(model="m:x", messages=sent, tools=REQUEST.tools, params=REQUEST.params)
        assert request.cache_key(namespace=f"candidate:c#{k}") == scratch_key(request, f"candidate:c#{k}")
        assert request.cache_key_v1() == scratch_key_v1(request)
        assert request.cache_key_v1(namespace="n") == scratch_key_v1(request, "n")


@given(messages=_messages, data=st.data())
def test_a_key_chained_on_a_prefix_differs_when_any_message_differs(
    messages: list[Message], data: st.DataObject
) -> None:
    history = tuple(messages)
    whole = ModelRequest(model="m:x", messages=history)
    before = whole.cache_key()  # keeps the states of every prefix to chain on
    i = data.draw(st.integers(0, len(history) - 1))
    changed = history[i].model_copy(update={"content": (history[i].content or "") + "!"})
    other = ModelRequest(model="m:x", messages=(*history[:i], changed, *history[i + 1 :]))
    assert other.cache_key() == scratch_key(other) != before
    longer = ModelRequest(model="m:x", messages=(*history, changed))
    assert longer.cache_key() == scratch_key(longer) != before
    assert whole.cache_key() == before
