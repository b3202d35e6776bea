"""The readers of the providers' native message formats read back exactly what the adapters put on the wire:
conversations encoded with each adapter's own encoder come back equal, the tau-bench demo data converted to each
format replays with no error, and a malformed record becomes an error naming its field, never a crash."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import delta_eval as de
from delta_eval.adapters.anthropic import encode_messages
from delta_eval.adapters.gemini import encode_contents
from delta_eval.adapters.openai_responses import encode_input
from delta_eval.demo import DEMO_TOOLS, demo_config, demo_conversations
from delta_eval.exceptions import RecordError
from delta_eval.ingest.native import detect_format, native_conversation
from delta_eval.mapping import FieldMapping
from delta_eval.schema import Conversation, MediaPart, Message, ReasoningState, ToolCall

MODEL = "m1"
#: The first bytes of a PNG file, in base64.
PNG = "iVBORw0KGgo="
FORMATS = ("anthropic", "gemini", "openai-responses")


def anthropic_body(messages: tuple[Message, ...]) -> dict[str, Any]:
    system, msgs = encode_messages(messages, MODEL)
    return {"model": MODEL, "messages": msgs} | ({"system": system} if system is not None else {})


def gemini_body(messages: tuple[Message, ...]) -> dict[str, Any]:
    system, contents = encode_contents(messages, MODEL)
    extra = {"systemInstruction": {"parts": [{"text": system}]}} if system is not None else {}
    return {"model": MODEL, "contents": contents} | extra


def responses_body(messages: tuple[Message, ...]) -> dict[str, Any]:
    instructions, items = encode_input(messages, MODEL)
    return {"model": MODEL, "input": items} | ({"instructions": instructions} if instructions is not None else {})


ENCODE: dict[str, Callable[[tuple[Message, ...]], dict[str, Any]]] = {
    "anthropic": anthropic_body,
    "gemini": gemini_body,
    "openai-responses": responses_body,
}


def with_reasoning(m: Message, fmt: str, thought: str) -> Message:
    """``m`` with the reasoning state the format's adapter would keep for it (consistent with its text and calls)."""
    if fmt == "anthropic":
        blocks: list[dict[str, Any]] = [{"type": "thinking", "thinking": thought, "signature": "c2ln"}]
        blocks += [{"type": "text", "text": m.content}] if m.content else []
        blocks += [{"type": "tool_use", "id": c.id, "name": c.name, "input": c.parsed_arguments} for c in m.tool_calls]
        data: dict[str, Any] = {"content": blocks}
    elif fmt == "gemini":
        parts: list[dict[str, Any]] = [{"text": thought, "thought": True}]
        parts += [{"text": m.content, "thought_signature": "c2ln"}] if m.content else []
        parts += [{"function_call": {"id": c.id, "name": c.name, "args": c.parsed_arguments}} for c in m.tool_calls]
        data = {"parts": parts}
    else:
        data = {"items": [{"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": thought}]}]}
    return m.model_copy(update={"reasoning": ReasoningState(provider=fmt, model=MODEL, data=data, summary=thought)})


texts = st.text(st.characters(codec="utf-8"), min_size=1, max_size=12)
arguments = st.dictionaries(
    st.text("abcxyz", min_size=1, max_size=4), st.integers() | st.booleans() | texts, max_size=3
).map(lambda d: json.dumps(d, ensure_ascii=False))


images = st.binary(min_size=1, max_size=24).map(lambda raw: MediaPart.from_bytes("image", raw, "image/png"))


@st.composite
def conversations(draw: st.DrawFn, fmt: str) -> tuple[Message, ...]:
    """A conversation with tool rounds: optional system prompt, user turns (some with images), each answered by zero
    or more tool rounds (narration optional, one to three calls, their results) and a final text; reasoning on some
    turns."""
    out: list[Message] = []
    if draw(st.booleans()):
        out.append(Message(role="system", content=draw(texts)))
    n = 0
    for _ in range(draw(st.integers(1, 3))):
        media = draw(st.lists(images, max_size=2).map(tuple))
        out.append(Message(role="user", content=draw(texts), media=media))
        for _ in range(draw(st.integers(0, 2))):
            calls = []
            for _ in range(draw(st.integers(1, 3))):
                n += 1
                calls.append(ToolCall(id=f"call_{n}", name=draw(st.sampled_from(["lookup", "book"])),
                                      arguments=draw(arguments)))  # fmt: skip
            m = Message(role="assistant", content=draw(st.none() | texts), tool_calls=tuple(calls))
            out.append(with_reasoning(m, fmt, draw(texts)) if draw(st.booleans()) else m)
            out += [Message(role="tool", content=draw(st.text(max_size=8)), tool_call_id=c.id, name=c.name)
                    for c in calls]  # fmt: skip
        final = Message(role="assistant", content=draw(texts))
        out.append(with_reasoning(final, fmt, draw(texts)) if draw(st.booleans()) else final)
    return tuple(out)


def read(fmt: str, body: dict[str, Any]) -> tuple[Message, ...]:
    return native_conversation(FieldMapping(message_format=fmt), fmt, body, source="s", label="r").messages


@pytest.mark.parametrize("fmt", FORMATS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_what_the_adapter_encodes_reads_back_equal(fmt: str, data: st.DataObject) -> None:
    messages = data.draw(conversations(fmt))
    assert read(fmt, ENCODE[fmt](messages)) == messages


def test_native_media_errors_and_id_less_gemini_calls_are_read() -> None:
    system = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    anthropic = read("anthropic", {"system": system, "messages": [
        {"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                  "data": PNG}},
                                     {"type": "text", "text": " what is this?"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "is_error": True,
                                      "content": [{"type": "text", "text": "boom"}]}]},
        {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "xx"}, {"type": "text", "text": "ok"}]},
    ]})  # fmt: skip
    assert anthropic[0].content == "a\n\nb"
    assert anthropic[1].content == " what is this?"
    assert anthropic[1].media == (MediaPart.from_base64("image", PNG, "image/png"),)
    assert anthropic[3].content == "[tool error] boom"
    assert anthropic[4].reasoning is not None
    assert anthropic[4].reasoning.provider == "anthropic"
    gemini = read("gemini", {"contents": [
        {"role": "user", "parts": [{"inlineData": {"mimeType": "image/jpeg", "data": PNG}}]},
        {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {"a": 1}}, "thoughtSignature": "c2ln"},
                                    {"functionCall": {"name": "g", "args": {}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "g", "response": {"rows": 2}}},
                                   {"functionResponse": {"name": "f", "response": {"error": "no"}}}]},
    ]})  # fmt: skip
    assert gemini[0].content == ""
    assert gemini[0].media == (MediaPart.from_base64("image", PNG, "image/jpeg"),)
    assert [c.id for c in gemini[1].tool_calls] == ["gemini_0_f", "gemini_1_g"]
    assert gemini[1].reasoning is not None
    assert gemini[1].reasoning.provider == "gemini"
    assert [(m.tool_call_id, m.content) for m in gemini[2:]] == [("gemini_1_g", '{"rows": 2}'),
                                                                ("gemini_0_f", "[tool error] no")]  # fmt: skip


@pytest.mark.parametrize(
    ("fmt", "tools"),
    [
        ("anthropic", [{"name": "f", "description": "d", "input_schema": {"type": "object"}},
                       {"type": "web_search_20250305", "name": "web_search"}]),
        ("gemini", [{"functionDeclarations": [{"name": "f", "description": "d", "parameters": {"type": "object"}}]},
                    {"googleSearch": {}}]),
        ("openai-responses", [{"type": "function", "name": "f", "description": "d", "parameters": {"type": "object"}},
                              {"type": "web_search"}]),
    ],
)  # fmt: skip
def test_native_tool_declarations_are_read_and_built_in_tools_left_out(fmt: str, tools: list[Any]) -> None:
    body = ENCODE[fmt]((Message(role="user", content="hi"), Message(role="assistant", content="yo"))) | {"tools": tools}
    conv = native_conversation(FieldMapping(), fmt, body, source="s", label="r")
    assert [(t.name, t.description, t.parameters) for t in conv.tools] == [("f", "d", {"type": "object"})]


def as_objects(messages: tuple[Message, ...]) -> tuple[Message, ...]:
    """Messages with their calls' arguments spelled as ``json.dumps`` spells them: Anthropic and Gemini carry
    arguments as objects, so their spacing is the wire's, not the recording's."""
    return tuple(
        m.model_copy(update={"tool_calls": tuple(
            c.model_copy(update={"arguments": json.dumps(c.parsed_arguments, ensure_ascii=False)}) for c in m.tool_calls
        )})
        for m in messages
    )  # fmt: skip


def records_of(fmt: str, convs: list[Conversation]) -> list[dict[str, Any]]:
    return [{"id": c.id, "meta": c.metadata} | ENCODE[fmt](c.messages) for c in convs]


@pytest.mark.parametrize("fmt", [*FORMATS, "auto"])
def test_the_demo_data_in_each_native_format_reads_back_and_replays_with_no_error(fmt: str, tmp_path: Path) -> None:
    convs, bad = demo_conversations().load()
    assert bad == []
    convs = convs[:8]
    wire = fmt if fmt != "auto" else "gemini"
    path = tmp_path / "native.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records_of(wire, convs)))
    meta = {k: f"meta.{k}" for k in convs[0].metadata}
    source = de.read_conversations(path, message_format=fmt, metadata=meta, tools=DEMO_TOOLS)  # type: ignore[arg-type]
    good, bad = source.load()
    assert bad == []
    assert [as_objects(c.messages) for c in good] == [as_objects(c.messages) for c in convs]
    cfg = demo_config(tmp_path / "run", n=8, latency_ms=0.0, judges="rule")
    result = de.run(cfg.model_copy(update={"sample": de.Stratified(n=8)}), conversations=source)
    assert result.table("errors").num_rows == 0
    assert result.table("replays").num_rows > 0


TOOL_USE = {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]}
HOSTILE = [
    ("anthropic", {"messages": "hi"}, "messages"),
    ("anthropic", {"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
    ("anthropic", {"messages": [{"role": "user", "content": [{"type": "audio"}]}]}, "messages[0].content[0].type"),
    (
        "anthropic",
        {
            "messages": [
                {"role": "user", "content": "a"},
                {**TOOL_USE, "content": [{"type": "tool_use", "id": "t1", "input": {}}]},
            ]
        },
        "messages[1].content[0].name",
    ),
    ("anthropic", {"messages": [{"role": "user", "content": "a"}, TOOL_USE]}, "messages[1].content[0]"),
    (
        "anthropic",
        {
            "messages": [
                {"role": "user", "content": "a"},
                TOOL_USE,
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "zz", "content": "x"}]},
            ]
        },
        "messages[2].content[0].tool_use_id",
    ),
    ("anthropic", {"system": 5, "messages": [{"role": "user", "content": "a"}]}, "system"),
    ("gemini", {"contents": [{"role": "user", "parts": "hi"}]}, "contents[0].parts"),
    (
        "gemini",
        {"contents": [{"role": "model", "parts": [{"functionCall": {"args": {}}}]}]},
        "contents[0].parts[0].functionCall.name",
    ),
    (
        "gemini",
        {"contents": [{"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {}}}]}]},
        "contents[0].parts[0].functionResponse",
    ),
    ("gemini", {"contents": [{"role": "critic", "parts": [{"text": "x"}]}]}, "contents[0].role"),
    ("openai-responses", {"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}, "input[0].call_id"),
    (
        "openai-responses",
        {"input": [{"type": "function_call_output", "call_id": "c9", "output": "x"}]},
        "input[0].call_id",
    ),
    ("openai-responses", {"input": [{"type": "web_search_call"}]}, "input[0].type"),
    ("openai-responses", {"instructions": ["x"], "input": "hi"}, "instructions"),
]


@pytest.mark.parametrize(("fmt", "body", "field"), HOSTILE)
def test_a_malformed_record_is_an_error_naming_the_source_record_and_field(
    fmt: str, body: dict[str, Any], field: str, tmp_path: Path
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"id": "x", "request": body}) + "\n")
    good, bad = de.read_conversations(path, messages="request", message_format=fmt).load()  # type: ignore[arg-type]
    assert good == []
    [error] = bad
    assert (error.source, error.record, error.field) == (str(path), "line 1 (id x)", f"request.{field}")


def test_a_parquet_source_keeping_native_lists_as_json_text_reads(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    convs, _ = demo_conversations().load()
    rows = [{k: json.dumps(v) if isinstance(v, list) else v for k, v in r.items() if k != "meta"}
            for r in records_of("anthropic", convs[:3])]  # fmt: skip
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "claude.parquet")
    good, bad = de.read_conversations(tmp_path / "claude.parquet", message_format="auto").load()
    assert bad == []
    assert [as_objects(c.messages) for c in good] == [as_objects(c.messages) for c in convs[:3]]


def test_bad_native_records_become_error_rows_and_the_run_goes_on(tmp_path: Path) -> None:
    convs, _ = demo_conversations().load()
    records = records_of("anthropic", convs[:6])
    records[2]["messages"][0]["role"] = "robot"
    path = tmp_path / "mixed.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    cfg = demo_config(tmp_path / "run", n=6, latency_ms=0.0, judges="rule")
    source = de.read_conversations(path, message_format="auto", tools=DEMO_TOOLS)
    result = de.run(cfg.model_copy(update={"sample": de.Stratified(n=6)}), conversations=source)
    rows = result.table("errors").select(["stage", "record", "field"]).to_pylist()
    assert rows == [{"stage": "ingest", "record": f"line 3 (id {convs[2].id})", "field": "messages[0].role"}]


def test_detection_that_finds_no_known_shape_says_what_it_looked_for_and_found(tmp_path: Path) -> None:
    path = tmp_path / "odd.jsonl"
    path.write_text(json.dumps({"id": "x", "turns": []}) + "\n")
    _, [error] = de.read_conversations(path, message_format="auto").load()
    assert error.field == "message_format"
    assert "'contents' (Gemini)" in error.reason
    assert "found the fields ['id', 'turns']" in error.reason


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=6),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.sampled_from(
        ["role", "content", "type", "text", "id", "name", "input", "parts", "functionCall", "functionResponse",
         "call_id", "arguments", "output", "tool_use_id", "args", "response", "thought", "is_error"]), kids,
        max_size=4),
    max_leaves=25,
)  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("fmt", FORMATS)
@settings(max_examples=300, deadline=None)
@given(items=st.lists(json_values, min_size=0, max_size=5), system=json_values, tools=json_values, model=json_values)
def test_any_native_record_reads_or_is_a_record_error(
    fmt: str, items: list[Any], system: Any, tools: Any, model: Any
) -> None:
    key = {"anthropic": "messages", "gemini": "contents", "openai-responses": "input"}[fmt]
    body = {key: items, "system": system, "systemInstruction": system, "instructions": system, "output": items,
            "tools": tools, "model": model}  # fmt: skip
    with contextlib.suppress(ValueError):  # what detection says when it finds no known shape
        detect_format(body, FieldMapping())
    try:
        native_conversation(FieldMapping(), fmt, body, source="s", label="r")
    except RecordError as exc:
        error = exc  # anything else raised fails the test
    else:
        return
    assert error.source == "s"
    assert error.record.startswith("r")


def test_a_native_export_is_pseudonymised_as_it_is_read(tmp_path: Path) -> None:
    import json

    import delta_eval as de

    record = {
        "id": "c1",
        "system": "You help customers.",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "I am ana@example.com, refund me"}]},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t1", "name": "lookup", "input": {"email": "ana@example.com"}}],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "found ana@example.com"}],
            },
            {"role": "assistant", "content": [{"type": "text", "text": "Done."}]},
        ],
    }
    path = tmp_path / "anthropic.jsonl"
    path.write_text(json.dumps(record) + "\n")
    source = de.read_conversations(path, id="id", message_format="anthropic", pseudonymize=de.Pseudonymize(salt="s"))
    [conv] = [c for c in source if isinstance(c, de.Conversation)]
    text = conv.model_dump_json()
    assert "ana@example.com" not in text
    call = conv.messages[2].tool_calls[0]
    fake = json.loads(call.arguments)["email"]
    assert fake.endswith(".com")
    assert "@" in fake
    assert fake in (conv.messages[1].content or "")
    assert fake in (conv.messages[3].content or "")


def test_a_block_whose_type_is_not_text_names_no_anthropic_block() -> None:
    """A content block's ``type`` of a list or an object (a malformed export) is no Anthropic block's: the format is
    told from the rest, never an error of hashing it (hypothesis found ``{"type": []}``)."""
    for odd in ([], {}, 3):
        record = {"messages": [{"role": "user", "content": [{"type": odd}]}]}
        assert detect_format(record, FieldMapping()) == "openai"
        assert detect_format({**record, "system": "be brief"}, FieldMapping()) == "anthropic"
