"""OpenTelemetry GenAI spans read as conversations: the real instrumentations (the official OpenAI one in each of its
content modes, OpenLLMetry's Anthropic one) drive real SDK clients against the fake provider servers, the spans and
log records they write are exported as the Collector's file exporter writes OTLP/JSON, read back, and replayed with
no error; a hand-built export with a mid-conversation skill switch replays each call with its own system prompt and
tools; bad spans become errors naming the span and the field."""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.json_format import MessageToDict
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common._internal import _encode_value
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import delta_eval as de
from delta_eval.exceptions import RecordError
from delta_eval.ingest.otel_genai import any_value, looks_like
from delta_eval.ingest.traces import TracedCall
from delta_eval.replay.points import replay_points
from delta_eval.schema import Conversation, Message, ToolCall, ToolSpec
from delta_eval.testing import FakeAnthropicServer, FakeOpenAIServer

KEY = "sk-otel-test"
WEATHER = ToolSpec(
    name="get_weather",
    description="The weather in a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
SYSTEM = "You are a weather bot."


def weather_conversation() -> Conversation:
    """A two-round tool conversation: one call, its result, narration with a second call, its result, the answer."""
    return Conversation(
        id="weather",
        tools=(WEATHER,),
        messages=(
            Message(role="system", content=SYSTEM),
            Message(role="user", content="Weather in Paris and Rome?"),
            Message(
                role="assistant", tool_calls=(ToolCall(id="c1", name="get_weather", arguments='{"city": "Paris"}'),)
            ),
            Message(role="tool", tool_call_id="c1", name="get_weather", content="sunny"),
            Message(
                role="assistant",
                content="Let me check Rome.",
                tool_calls=(ToolCall(id="c2", name="get_weather", arguments='{"city": "Rome"}'),),
            ),
            Message(role="tool", tool_call_id="c2", name="get_weather", content="rain"),
            Message(role="assistant", content="Paris is sunny, Rome rainy."),
        ),
    )


def _shape(messages: tuple[Message, ...]) -> list[tuple[Any, ...]]:
    """Messages as what a replay compares: roles, text, tool names and arguments (the fake server picks its ids)."""
    return [(m.role, m.content, [(c.name, json.loads(c.arguments)) for c in m.tool_calls], m.name) for m in messages]


# -- OTLP/JSON as the Collector's file exporter writes it ---------------------------------------------------------

_IDS = ("traceId", "spanId", "parentSpanId")


def _hex_ids(value: Any) -> Any:
    """Protobuf's JSON writes bytes as base64; OTLP/JSON (and so the Collector) writes trace and span ids as hex."""
    if isinstance(value, dict):
        return {
            k: base64.b64decode(v).hex() if k in _IDS and isinstance(v, str) else _hex_ids(v) for k, v in value.items()
        }
    if isinstance(value, list):
        return [_hex_ids(v) for v in value]
    return value


def otlp_lines(spans: Any, logs: Any = ()) -> list[str]:
    """One ``ExportTraceServiceRequest`` line, and one ``ExportLogsServiceRequest`` line when there are log records:
    the SDK's own OTLP encoder, then OTLP/JSON (hex ids, enums as numbers, 64-bit integers as strings)."""
    lines = [json.dumps(_hex_ids(MessageToDict(encode_spans(spans), use_integers_for_enums=True)))]
    if logs:
        lines.append(json.dumps(_hex_ids(MessageToDict(encode_logs(logs), use_integers_for_enums=True))))
    return lines


class Telemetry:
    """An SDK tracer and logger provider exporting to memory."""

    def __init__(self) -> None:
        self.spans, self.logs = InMemorySpanExporter(), InMemoryLogRecordExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.logger_provider = LoggerProvider()
        self.logger_provider.add_log_record_processor(SimpleLogRecordProcessor(self.logs))
        self.tracer = self.tracer_provider.get_tracer("tests.agent")

    def write(self, path: Path) -> Path:
        """Write what was exported as the file exporter would."""
        logs = [r for r in self.logs.get_finished_logs()]
        path.write_text("\n".join(otlp_lines(self.spans.get_finished_spans(), logs)) + "\n")
        return path

    def shutdown(self) -> None:
        self.tracer_provider.shutdown()
        self.logger_provider.shutdown()


@contextmanager
def instrumented(instrumentor: Any, **kwargs: Any) -> Iterator[Telemetry]:
    """The instrumentor on, exporting to memory, and off again whatever happens."""
    telemetry = Telemetry()
    instrumentor.instrument(
        tracer_provider=telemetry.tracer_provider, logger_provider=telemetry.logger_provider, **kwargs
    )
    try:
        yield telemetry
    finally:
        instrumentor.uninstrument()
        telemetry.shutdown()


def run_agent(telemetry: Telemetry, ask: Callable[[list[dict[str, Any]]], Any], results: dict[str, str]) -> None:
    """The agent loop, in one ``invoke_agent`` span (so one trace) with an ``execute_tool`` span per tool call:
    ``ask`` sends the messages so far (OpenAI chat) and returns the assistant message dict."""
    sent: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Weather in Paris and Rome?"},
    ]
    with telemetry.tracer.start_as_current_span(
        "invoke_agent weather", attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "weather"}
    ):
        for _ in range(4):
            answer = ask(sent)
            sent.append(answer)
            if not answer.get("tool_calls"):
                return
            for call in answer["tool_calls"]:
                city = json.loads(call["function"]["arguments"])["city"]
                with telemetry.tracer.start_as_current_span(
                    "execute_tool get_weather",
                    attributes={
                        "gen_ai.operation.name": "execute_tool",
                        "gen_ai.tool.name": "get_weather",
                        "gen_ai.tool.call.id": call["id"],
                    },
                ):
                    sent.append({"role": "tool", "tool_call_id": call["id"], "content": results[city]})
    raise AssertionError("the agent did not finish")


def openai_trace(path: Path, monkeypatch: pytest.MonkeyPatch, mode: str) -> Path:
    """A trace of the weather conversation as the official OpenAI instrumentation writes it in ``mode``:
    ``span_only`` (current attributes), ``event_only`` (the current conventions' details event, a log record) or
    ``legacy`` (the v1.30 conventions: one log record per message)."""
    import openai
    import opentelemetry.instrumentation.openai_v2 as openai_v2

    if mode == "legacy":
        # This version always takes the current conventions; the v1.30 path (per-message events) is still its code,
        # chosen when experimental mode is off, as it was by default in the versions before.
        monkeypatch.setattr(openai_v2, "is_experimental_mode", lambda: False)
        monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    else:
        monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
        monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", mode.upper())
    wire_tools = [{"type": "function", "function": WEATHER.model_dump()}]
    with (
        instrumented(openai_v2.OpenAIInstrumentor()) as telemetry,
        FakeOpenAIServer(recordings=[weather_conversation()], api_key=KEY) as server,
        openai.OpenAI(base_url=server.base_url, api_key=KEY, max_retries=0) as client,
    ):

        def ask(sent: list[dict[str, Any]]) -> Any:
            reply = client.chat.completions.create(model="gpt-4o", messages=sent, tools=wire_tools)  # type: ignore[arg-type]
            return reply.choices[0].message.model_dump(exclude_none=True)

        run_agent(telemetry, ask, {"Paris": "sunny", "Rome": "rain"})
        return telemetry.write(path)


def replay_on_openai(tmp_path: Path, conversations: list[Conversation]) -> de.RunResult:
    with FakeOpenAIServer(recordings=conversations, api_key=KEY) as server:
        opts = {"base_url": server.base_url, "api_key": KEY}
        return de.run(
            conversations=conversations,
            baseline=de.Variant(model="openai:gpt-4o", provider_options=opts),
            candidate=de.Variant(model="openai:gpt-4o-mini", provider_options=opts),
            out=tmp_path / "run",
        )


@pytest.mark.parametrize("mode", ["span_only", "event_only", "legacy"])
def test_the_official_openai_instrumentation_reads_back_and_replays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    path = openai_trace(tmp_path / "trace.jsonl", monkeypatch, mode)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert ("resourceLogs" in lines[-1]) == (mode != "span_only")
    for fmt in ("otel", "auto"):
        # The chat instrumentation does not record the tools offered: they come from the mapping.
        good, bad = de.read_conversations(
            path,
            message_format=fmt,
            tools=[WEATHER.model_dump()],  # type: ignore[arg-type]
            metadata=["gen_ai.request.model", "resource.service.name"],
        ).load()
        assert bad == []
        assert len(good) == 1  # three model calls in one trace; the agent and tool spans are skipped
        (conv,) = good
        assert _shape(conv.messages) == _shape(weather_conversation().messages)
        assert [c.message_index for c in conv.calls] == [2, 4, 6]
        assert all(c.system == SYSTEM for c in conv.calls)
        assert conv.tools == (WEATHER,)
        assert conv.metadata["name"].startswith("unknown_service")
        assert "(3 calls" in conv.record
        if mode == "span_only":
            assert conv.metadata["model"] == "gpt-4o"
        if mode == "legacy":
            # The v1.30 events drop an assistant message's text when it calls tools: the last call was sent a
            # history that differs from the conversation's, so it keeps its own.
            assert conv.calls[2].input is not None
            assert conv.calls[2].input[3].content is None
    result = replay_on_openai(tmp_path, good)
    assert result.status == "completed"
    assert result.counts.errors == 0
    assert result.counts.pairs == result.counts.pairs_planned > 0


def test_openllmetry_anthropic_spans_read_back_and_replay(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """OpenLLMetry's Anthropic instrumentation (the ``opentelemetry-instrumentation-anthropic`` on PyPI) on the real
    ``anthropic`` client: system prompt, tools and Anthropic's content blocks as the current attributes."""
    import anthropic
    from opentelemetry.instrumentation.anthropic import AnthropicInstrumentor

    monkeypatch.setenv("TRACELOOP_TRACE_CONTENT", "true")
    tools = [{"name": WEATHER.name, "description": WEATHER.description, "input_schema": WEATHER.parameters}]
    with (
        instrumented(AnthropicInstrumentor()) as telemetry,
        FakeAnthropicServer(recordings=[weather_conversation()], api_key=KEY) as server,
        anthropic.Anthropic(base_url=server.url, api_key=KEY, max_retries=0) as client,
    ):

        def ask(sent: list[dict[str, Any]]) -> Any:
            messages: list[dict[str, Any]] = []
            for m in sent[1:]:  # the chat messages as Anthropic's blocks
                if m["role"] == "tool":
                    block = {"type": "tool_result", "tool_use_id": m["tool_call_id"], "content": m["content"]}
                    messages.append({"role": "user", "content": [block]})
                elif m["role"] == "assistant":
                    blocks: list[dict[str, Any]] = [{"type": "text", "text": m["content"]}] if m.get("content") else []
                    blocks += [
                        {
                            "type": "tool_use",
                            "id": c["id"],
                            "name": c["function"]["name"],
                            "input": json.loads(c["function"]["arguments"]),
                        }
                        for c in m.get("tool_calls", ())
                    ]
                    messages.append({"role": "assistant", "content": blocks})
                else:
                    messages.append(m)
            reply = client.messages.create(
                model="claude-sonnet-4-5", max_tokens=256, system=SYSTEM, messages=messages, tools=tools
            )  # type: ignore[arg-type]
            text = "".join(b.text for b in reply.content if b.type == "text")
            calls = [
                {"id": b.id, "type": "function", "function": {"name": b.name, "arguments": json.dumps(b.input)}}
                for b in reply.content
                if b.type == "tool_use"
            ]
            return {
                "role": "assistant",
                **({"content": text} if text else {}),
                **({"tool_calls": calls} if calls else {}),
            }

        run_agent(telemetry, ask, {"Paris": "sunny", "Rome": "rain"})
        path = telemetry.write(tmp_path / "trace.jsonl")
    good, bad = de.read_conversations(path, message_format="auto").load()
    assert bad == []
    (conv,) = good
    assert _shape(conv.messages) == _shape(weather_conversation().messages)
    assert [(c.message_index, c.system, c.tools) for c in conv.calls] == [(i, SYSTEM, (WEATHER,)) for i in (2, 4, 6)]
    with FakeAnthropicServer(recordings=good, api_key=KEY) as server:
        opts = {"base_url": server.url, "api_key": KEY}
        result = de.run(
            conversations=good,
            baseline=de.Variant(model="anthropic:claude-sonnet-4-5", provider_options=opts),
            candidate=de.Variant(model="anthropic:claude-haiku-4-5", provider_options=opts),
            out=tmp_path / "run",
        )
    assert result.counts.errors == 0
    assert result.counts.pairs == result.counts.pairs_planned > 0


# -- a hand-built export: a skill switch mid-conversation --------------------------------------------------------

TRIAGE, BILLING = "You are triage. Hand billing questions over.", "You are billing. Refund when asked."
TRANSFER = {
    "type": "function",
    "name": "transfer_to_billing",
    "description": "Hand over to billing.",
    "parameters": {"type": "object", "properties": {}},
}
REFUND = {
    "type": "function",
    "name": "refund",
    "description": "Refund an order.",
    "parameters": {"type": "object", "properties": {"order": {"type": "string"}}, "required": ["order"]},
}


def _attr(key: str, value: Any) -> dict[str, Any]:
    return {"key": key, "value": MessageToDict(_encode_value(value))}


def _text(role: str, text: str) -> dict[str, Any]:
    return {"role": role, "parts": [{"type": "text", "content": text}]}


def _span(span_id: str, start: int, attrs: dict[str, Any], name: str = "chat gpt-4o") -> dict[str, Any]:
    return {
        "traceId": "0af7651916cd43dd8448eb211c80319c",
        "spanId": span_id,
        "name": name,
        "kind": 3,
        "startTimeUnixNano": str(1_700_000_000_000_000_000 + start),
        "endTimeUnixNano": str(1_700_000_000_000_000_000 + start + 5),
        "attributes": [_attr(k, v) for k, v in attrs.items()],
    }


def _chat(span_id: str, start: int, system: str, tools: list[Any], sent: list[Any], answer: Any) -> dict[str, Any]:
    return _span(
        span_id,
        start,
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "openai",
            "gen_ai.request.model": "gpt-4o",
            "gen_ai.conversation.id": "conv-42",
            "gen_ai.system_instructions": json.dumps([{"type": "text", "content": system}]),
            "gen_ai.tool.definitions": json.dumps(tools),
            "gen_ai.input.messages": json.dumps(sent),
            "gen_ai.output.messages": json.dumps([{**answer, "finish_reason": "stop"}]),
        },
    )


def skill_switch_export() -> dict[str, Any]:
    """Triage hands the customer over to billing; billing is sent only the user's message, another system prompt and
    the refund tool. The spans are out of order in the file, and an agent and a tool span sit among them."""
    u1 = _text("user", "I was charged twice for order 42.")
    a1 = {
        "role": "assistant",
        "parts": [{"type": "tool_call", "id": "c1", "name": "transfer_to_billing", "arguments": {}}],
    }
    a2 = {
        "role": "assistant",
        "parts": [
            {"type": "reasoning", "content": "A duplicate charge: refund it."},
            {"type": "tool_call", "id": "c2", "name": "refund", "arguments": {"order": "42"}},
        ],
    }
    t2 = {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c2", "response": {"refunded": True}}]}
    a3, u2, a4 = _text("assistant", "Refunded order 42."), _text("user", "Thanks, bye."), _text("assistant", "Goodbye!")
    spans = [
        _chat("00000000000000b3", 30, BILLING, [REFUND], [u1, a2, t2, a3, u2], a4),
        _span("00000000000000a0", 0, {"gen_ai.operation.name": "invoke_agent"}, "invoke_agent support"),
        _chat("00000000000000a1", 10, TRIAGE, [TRANSFER], [u1], a1),
        _span(
            "00000000000000a2",
            15,
            {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "refund"},
            "execute_tool refund",
        ),
        _chat("00000000000000b1", 20, BILLING, [REFUND], [u1], a2),
        _chat("00000000000000b2", 25, BILLING, [REFUND], [u1, a2, t2], a3),
    ]
    resource = {"attributes": [_attr("service.name", "support-agent")]}
    return {"resourceSpans": [{"resource": resource, "scopeSpans": [{"scope": {"name": "agent"}, "spans": spans}]}]}


def test_a_skill_switch_replays_each_call_with_its_own_system_prompt_and_tools(tmp_path: Path) -> None:
    path = tmp_path / "export.json"
    path.write_text(json.dumps(skill_switch_export()))
    good, bad = de.read_conversations(path, message_format="otel", metadata=["gen_ai.provider.name"]).load()
    assert bad == []
    (conv,) = good
    assert conv.id == "conv-42"  # gen_ai.conversation.id groups the calls
    assert conv.metadata == {"name": "openai"}
    assert [m.role for m in conv.messages] == [
        "system",
        "user",
        "assistant",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
    ]
    assert conv.messages[0].content == TRIAGE
    assert conv.messages[3].reasoning is not None
    assert conv.messages[3].reasoning.summary == "A duplicate charge: refund it."
    assert (conv.messages[4].name, conv.messages[4].content) == ("refund", '{"refunded": true}')
    assert [(c.system, [t.name for t in c.tools or ()]) for c in conv.calls] == [
        (TRIAGE, ["transfer_to_billing"]),
        (BILLING, ["refund"]),
        (BILLING, ["refund"]),
        (BILLING, ["refund"]),
    ]
    triage, billing, bye = replay_points(conv)
    assert [t.name for t in triage.tools] == ["transfer_to_billing"]
    assert triage.context[0].content == TRIAGE
    assert [t.name for t in billing.tools] == ["refund"]
    assert [m.role for m in billing.context] == ["system", "user"]  # billing was sent the user's message only
    assert billing.context[0].content == BILLING
    assert billing.recorded.final_text == "Refunded order 42."
    assert bye.context[0].content == BILLING
    assert bye.context[-1].content == "Thanks, bye."
    result = de.run(
        conversations=good,
        baseline=de.Variant(model="simulated:a"),
        candidate=de.Variant(model="simulated:b"),
        out=tmp_path / "run",
    )
    assert result.counts.errors == 0
    assert result.counts.pairs == 3


# -- spans kept one per row ---------------------------------------------------------------------------------------


def test_flat_span_rows_in_parquet_and_clickhouse_columns(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    doc = skill_switch_export()
    spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
    rows = [
        {
            "trace_id": s["traceId"],
            "span_id": s["spanId"],
            "name": s["name"],
            "start_time_unix_nano": int(s["startTimeUnixNano"]),
            "attributes": [
                (
                    kv["key"],
                    json.dumps(any_value(kv["value"]))
                    if not isinstance(any_value(kv["value"]), str)
                    else any_value(kv["value"]),
                )
                for kv in s["attributes"]
            ],
            "resource_attributes": [("service.name", "support-agent")],
        }
        for s in spans
    ]
    kv = pa.map_(pa.string(), pa.string())
    schema = pa.schema(
        [
            ("trace_id", pa.string()),
            ("span_id", pa.string()),
            ("name", pa.string()),
            ("start_time_unix_nano", pa.int64()),
            ("attributes", kv),
            ("resource_attributes", kv),
        ]
    )
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), tmp_path / "spans.parquet")
    # The ClickHouse exporter's table, as JSON lines (SELECT ... FORMAT JSONEachRow): maps of strings.
    clickhouse = [
        {
            "Timestamp": "2023-11-14 22:13:20.0000000" + str(r["start_time_unix_nano"] % 100).zfill(2),
            "TraceId": r["trace_id"],
            "SpanId": r["span_id"],
            "SpanName": r["name"],
            "SpanAttributes": dict(r["attributes"]),
            "ResourceAttributes": {"service.name": "x"},
            "Events.Name": [],
            "Events.Timestamp": [],
            "Events.Attributes": [],
        }
        for r in rows
    ]
    (tmp_path / "clickhouse.jsonl").write_text("".join(json.dumps(r) + "\n" for r in clickhouse))
    for name in ("spans.parquet", "clickhouse.jsonl"):
        good, bad = de.read_conversations(tmp_path / name, message_format="auto").load()
        assert bad == []
        (conv,) = good
        assert conv.id == "conv-42"
        assert [c.system for c in conv.calls] == [TRIAGE, BILLING, BILLING, BILLING]
    sql = f"SELECT * FROM read_parquet('{tmp_path / 'spans.parquet'}') WHERE name LIKE 'chat%'"
    good, bad = de.read_conversations_sql(sql, message_format="otel").load()
    assert (len(good), bad) == (1, [])


# -- bad spans ----------------------------------------------------------------------------------------------------


def test_bad_spans_become_errors_naming_the_span_and_the_field(tmp_path: Path) -> None:
    good_doc = skill_switch_export()

    def chat(span_id: str, **attrs: Any) -> dict[str, Any]:
        base = {
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": json.dumps([_text("user", "hi")]),
            "gen_ai.output.messages": json.dumps([_text("assistant", "hello")]),
        }
        return _span(span_id, 1, {**base, **attrs})

    bad_spans = [
        chat("00000000000000e1", **{"gen_ai.input.messages": "[{not json"}),
        chat(
            "00000000000000e2",
            **{"gen_ai.input.messages": json.dumps([{"role": "user", "parts": [{"type": "hologram"}]}])},
        ),
        chat(
            "00000000000000e3",
            **{
                "gen_ai.output.messages": json.dumps(
                    [{"role": "assistant", "parts": [{"type": "tool_call", "id": "x", "arguments": {}}]}]
                )
            },
        ),
        {**chat("00000000000000e4"), "attributes": [{"key": "gen_ai.operation.name", "value": {"intValue": "many"}}]},
        _span("00000000000000e5", 1, {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"}),
        {**chat("00000000000000e6"), "spanId": None},
    ]
    doc = {"resourceSpans": [{"scopeSpans": [{"spans": bad_spans}]}]}
    path = tmp_path / "spans.jsonl"
    path.write_text("\n".join([json.dumps(good_doc), json.dumps(doc), "[1, 2]", "{broken"]) + "\n")
    source = de.read_conversations(path, message_format="otel")
    good, bad = source.load()
    assert [c.id for c in good] == ["conv-42"]
    found = {(e.record, e.field): e.reason for e in bad}
    assert all(e.source == str(path) for e in bad)
    assert "not valid JSON" in found["line 2, span 0 (span id 00000000000000e1)", "gen_ai.input.messages"]
    assert "'hologram'" in found["line 2, span 1 (span id 00000000000000e2)", "gen_ai.input.messages[0].parts[0].type"]
    assert "name" in found["line 2, span 2 (span id 00000000000000e3)", "gen_ai.output.messages[0].parts[0].name"]
    assert "intValue" in found["line 2, span 3", "attributes[gen_ai.operation.name]"]
    assert "content capture" in found["line 2, span 4 (span id 00000000000000e5)", "gen_ai.input.messages"]
    assert "no id" in found["line 2, span 5", "spanId"]
    assert "expected a span or an OTLP export" in found["line 3", ""]
    assert "not valid JSON" in found["line 4", ""]
    assert len(bad) == 8
    # A run over the source carries on, the errors in its errors table.
    result = de.run(
        conversations=source,
        baseline=de.Variant(model="simulated:a"),
        candidate=de.Variant(model="simulated:b"),
        out=tmp_path / "run",
    )
    assert (result.counts.read, result.counts.read_errors, result.counts.pairs) == (9, 8, 3)


def test_auto_tells_otel_spans_from_other_records() -> None:
    assert looks_like(skill_switch_export())
    assert looks_like({"resourceLogs": []})
    assert looks_like({"span_id": "a1", "attributes": {"gen_ai.operation.name": "chat"}})
    assert looks_like({"SpanId": "a1", "SpanAttributes": [("gen_ai.operation.name", "chat")]})
    openinference = {
        "resourceSpans": [
            {
                "scopeSpans": [
                    {"spans": [{"attributes": [{"key": "openinference.span.kind", "value": {"stringValue": "LLM"}}]}]}
                ]
            }
        ]
    }
    assert not looks_like(openinference)
    assert not looks_like({"messages": [{"role": "user", "content": "hi"}]})
    assert not looks_like({"span_id": "a1", "attributes": {"llm.model_name": "x"}})


# -- the attribute-value decoder ----------------------------------------------------------------------------------

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False)
    | st.text()
    | st.binary(max_size=16)
)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)


@given(_values)
def test_any_value_decodes_what_the_sdk_encodes(value: Any) -> None:
    """Every attribute value the SDK's OTLP encoder writes, through protobuf's JSON (64-bit integers as text,
    infinities as names, bytes as base64, empty values left out), decodes to the value itself."""
    wire = json.loads(json.dumps(MessageToDict(_encode_value(value))))
    assert any_value(wire) == value


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_any_value_reads_every_double(value: float) -> None:
    decoded = any_value(MessageToDict(_encode_value(value)))
    assert decoded == value or (math.isnan(value) and math.isnan(decoded))


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        ({"intValue": "x"}, "not a number"),
        ({"stringValue": 3}, "not an OTLP AnyValue"),
        ({"a": 1, "b": 2}, "holds one value"),
        ({"bytesValue": "!!"}, "not base64"),
        ([1], "must be an OTLP AnyValue object"),
    ],
)
def test_any_value_refuses_what_is_not_one(bad: Any, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        any_value(bad)


def test_a_record_error_is_raised_nowhere(tmp_path: Path) -> None:
    """Every item a bad export gives is an error value: reading never raises."""
    path = tmp_path / "x.jsonl"
    path.write_text('{"resourceSpans": [1]}\n{"resourceSpans": [{"scopeSpans": [{"spans": [7]}]}]}\n')
    good, bad = de.read_conversations(path, message_format="otel").load()
    assert good == []
    assert [type(e) for e in bad] == [RecordError, RecordError]
    assert "not an OTLP export" in bad[0].reason
    assert "a span must be an object" in bad[1].reason


def test_a_trace_past_the_memory_bound_is_read_back_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ``MAX_HELD_CALLS`` the calls wait in a temporary file: the conversations, their order and errors are
    those read in memory, and the file is gone once the source has been read."""
    from delta_eval.ingest import otel_genai, traces
    from delta_eval.mapping import FieldMapping

    doc = skill_switch_export()
    lines = []
    for k in range(5):  # five conversations, a line each: past 3 calls held, part-read ones go to the file
        copy = json.loads(json.dumps(doc))
        for span in copy["resourceSpans"][0]["scopeSpans"][0]["spans"]:
            span["traceId"] = f"{k:032x}"
            for kv in span["attributes"]:
                if kv["key"] == "gen_ai.conversation.id":
                    kv["value"] = {"stringValue": f"conv-{k}"}
        lines.append(copy)
    records = [(f"line {i}", d) for i, d in enumerate(lines)] + [("line 9", RecordError("s", "line 9", "", "bad"))]
    spilled_dirs: list[str] = []
    real_spill = traces._Spill

    class Watched(real_spill):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__()
            spilled_dirs.append(self._dir.name)

    monkeypatch.setattr(traces, "_Spill", Watched)

    def read(max_held: int) -> list[Any]:
        calls = otel_genai.calls(records, "s")
        return [item for _, item in traces.conversations_of(calls, FieldMapping(), "s", max_held=max_held)]

    in_memory, spilled = read(10_000), read(3)
    assert len(spilled_dirs) == 1
    assert not Path(spilled_dirs[0]).exists()
    assert [c.id for c in spilled if isinstance(c, Conversation)] == [f"conv-{k}" for k in range(5)]
    assert spilled == in_memory


def _weather_calls_read(record: dict[str, Any], tmp_path: Path) -> Conversation:
    path = tmp_path / "spans.jsonl"
    path.write_text(json.dumps(record) + "\n")
    good, bad = de.read_conversations(path, message_format="auto").load()
    assert bad == []
    (conv,) = good
    return conv


def test_openllmetry_indexed_attributes(tmp_path: Path) -> None:
    """OpenLLMetry before the current attributes: ``gen_ai.prompt.N.*``, ``gen_ai.completion.N.*`` and the tools as
    ``llm.request.functions.N.*``, one span per call (a flat span row here)."""
    conv = weather_conversation()
    spans = []
    for n, i in enumerate(k for k, m in enumerate(conv.messages) if m.role == "assistant"):
        attrs: dict[str, Any] = {
            "llm.request.type": "chat",
            "gen_ai.system": "openai",
            "llm.request.functions.0.name": WEATHER.name,
            "llm.request.functions.0.description": WEATHER.description,
            "llm.request.functions.0.parameters": json.dumps(WEATHER.parameters),
        }
        for prefix, messages in (("gen_ai.prompt", conv.messages[:i]), ("gen_ai.completion", conv.messages[i : i + 1])):
            for j, m in enumerate(messages):
                attrs[f"{prefix}.{j}.role"] = m.role
                if m.content is not None:
                    attrs[f"{prefix}.{j}.content"] = m.content
                if m.tool_call_id:
                    attrs[f"{prefix}.{j}.tool_call_id"] = m.tool_call_id
                for c, call in enumerate(m.tool_calls):
                    attrs |= {
                        f"{prefix}.{j}.tool_calls.{c}.id": call.id,
                        f"{prefix}.{j}.tool_calls.{c}.name": call.name,
                        f"{prefix}.{j}.tool_calls.{c}.arguments": call.arguments,
                    }
        spans.append(
            {
                "trace_id": "ab" * 16,
                "span_id": f"{n:016x}",
                "name": "openai.chat",
                "start_time_unix_nano": n,
                "attributes": attrs,
            }
        )
    path = tmp_path / "spans.jsonl"
    path.write_text("".join(json.dumps(s) + "\n" for s in spans))
    good, bad = de.read_conversations(path, message_format="auto", metadata=["gen_ai.system"]).load()
    assert bad == []
    (read,) = good
    assert read.messages == conv.messages
    assert read.tools == (WEATHER,)
    assert read.metadata == {"system": "openai"}


def test_the_older_message_events_on_the_span(tmp_path: Path) -> None:
    """The v1.28-era events recorded as span events: the body as JSON in ``gen_ai.event.content``, or as the
    event's attributes."""
    conv = weather_conversation()
    last = len(conv.messages) - 1
    events = []
    for k, m in enumerate(conv.messages[:last]):
        body: dict[str, Any] = {"content": m.content} if m.content is not None else {}
        if m.tool_calls:
            body["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in m.tool_calls
            ]
        if m.role == "tool":
            body["id"] = m.tool_call_id
        attrs = (
            [_attr("gen_ai.event.content", json.dumps(body))]
            if k % 2
            else [_attr(a, v) for a, v in body.items() if isinstance(v, str)]
        )
        if k % 2 == 0 and "tool_calls" in body:
            attrs = [_attr("gen_ai.event.content", json.dumps(body))]
        events.append({"timeUnixNano": str(k), "name": f"gen_ai.{m.role}.message", "attributes": attrs})
    choice = {
        "index": 0,
        "finish_reason": "stop",
        "message": {"role": "assistant", "content": conv.messages[last].content},
    }
    events.append(
        {
            "timeUnixNano": "99",
            "name": "gen_ai.choice",
            "attributes": [_attr("gen_ai.event.content", json.dumps(choice))],
        }
    )
    span = _span("00000000000000c1", 0, {"gen_ai.operation.name": "chat", "gen_ai.system": "openai"})
    span["events"] = events
    read = _weather_calls_read({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}, tmp_path)
    assert read.messages == conv.messages
    assert [c.message_index for c in read.calls] == [last]


def _resending_export(compact_outputs: bool, trailing_comma: bool = False) -> dict[str, Any]:
    """Three calls, each re-sending the answers before it: the first answer calls a tool by id, the second calls one
    without an id (the reader makes one up, from the span's id); outputs written either as the inputs are (a re-sent
    answer's text is then found again) or compactly (it never is)."""
    u1, u2 = _text("user", "Weather in Paris?"), _text("user", "And Rome?")
    a1 = {"role": "assistant", "parts": [{"type": "tool_call", "id": "c1", "name": "get_weather",
                                          "arguments": {"city": "Paris"}}]}  # fmt: skip
    t1 = {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "response": "sunny"}]}
    a2 = {
        "role": "assistant",
        "parts": [
            {"type": "text", "content": "Sunny. Checking Rome."},
            {"type": "tool_call", "name": "get_weather", "arguments": {"city": "Rome"}},
        ],
    }
    t2 = {"role": "tool", "parts": [{"type": "tool_call_response", "id": "x", "response": "rain"}]}
    a3 = _text("assistant", "Rome is rainy.")
    inputs = [[u1], [u1, a1, t1, u2], [u1, a1, t1, u2, a2, t2]]
    spans = []
    for n, (sent, answer) in enumerate(zip(inputs, (a1, a2, a3), strict=True)):
        span = _chat(f"00000000000000c{n}", n * 10, SYSTEM, [], sent, answer)
        text = json.dumps(sent)
        if trailing_comma and n == 1:
            text = json.dumps(inputs[0])[:-1] + ", " + json.dumps(a1) + ",]"
        output = [{**answer, "finish_reason": "stop"}]
        for kv in span["attributes"]:
            if kv["key"] == "gen_ai.input.messages":
                kv["value"] = {"stringValue": text}
            if kv["key"] == "gen_ai.output.messages" and compact_outputs:
                kv["value"] = {"stringValue": json.dumps(output, separators=(",", ":"))}
        spans.append(span)
    return {"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}


def test_a_resent_answer_is_taken_as_read_and_reads_the_same(tmp_path: Path) -> None:
    from delta_eval.ingest.otel_genai import calls

    read: dict[bool, list[Any]] = {}
    for compact in (False, True):
        path = tmp_path / f"export-{compact}.json"
        path.write_text(json.dumps(_resending_export(compact)))
        convs = de.read_conversations(path, message_format="otel")
        read[compact] = [c.model_dump(exclude={"source", "record"}) for c in convs]
    assert read[False] == read[True]
    assert len(read[False]) == 1
    messages = read[False][0]["messages"]
    assert [m["tool_calls"][0]["id"] for m in messages if m["tool_calls"]] == ["c1", "00000000000000c1-1"]
    first, second, third = calls([("line 1", _resending_export(False))], "x")
    assert isinstance(first, TracedCall)
    assert isinstance(second, TracedCall)
    assert isinstance(third, TracedCall)
    assert second.call.input[1] is first.call.output[0]  # taken as read: its call has an id
    assert third.call.input[4] is not second.call.output[0]  # read again: its call's id is made from the span's
    assert third.call.input[4][2][0][0] == "00000000000000c2-1"


def test_a_resent_answer_before_a_trailing_comma_is_the_same_error() -> None:
    from delta_eval.ingest.otel_genai import calls

    errors = [[(e.record, e.field, e.reason) for e in calls([("line 1", _resending_export(compact, True))], "x")
               if isinstance(e, RecordError)] for compact in (False, True)]  # fmt: skip
    assert len(errors[0]) == 1
    assert errors[0] == errors[1]
    assert (errors[0][0][1], errors[0][0][2][:14]) == ("gen_ai.input.messages", "not valid JSON")
