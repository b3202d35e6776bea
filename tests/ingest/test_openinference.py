"""OpenInference spans read as conversations: spans recorded by the real OpenInference instrumentors of the real
``openai`` and ``anthropic`` SDKs (talking to the fake provider servers) read back as the conversations the agent
had, as flat SDK spans, as OTLP JSON and as Phoenix's export shape, and replay on the same wires with no error."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import delta_eval as de
from delta_eval.ingest.openinference import FORMAT
from delta_eval.ingest.trace_fields import unflatten
from delta_eval.ingest.traces import detect_trace_format
from delta_eval.schema import Conversation
from delta_eval.testing import FakeAnthropicServer, FakeOpenAIServer
from tests.ingest.traced_agents import (
    CLAUDE,
    MODEL,
    anthropic_call,
    canonical,
    openai_call,
    run_agent,
    tool_conversations,
)

pytest.importorskip("openinference.instrumentation.openai")


@pytest.fixture
def tracer() -> Iterator[Any]:
    """A tracer provider keeping finished spans in memory, with the OpenAI and Anthropic SDKs instrumented; both
    are uninstrumented and the provider shut down when the test ends."""
    from openinference.instrumentation.anthropic import AnthropicInstrumentor
    from openinference.instrumentation.openai import OpenAIInstrumentor
    from opentelemetry.sdk.trace import SpanLimits, TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    # The SDK keeps 128 attributes per span by default; a tool conversation's span has more (see the module doc).
    provider = TracerProvider(span_limits=SpanLimits(max_attributes=100_000))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentors = [OpenAIInstrumentor(), AnthropicInstrumentor()]
    for i in instrumentors:
        i.instrument(tracer_provider=provider)
    try:
        yield exporter
    finally:
        for i in instrumentors:
            i.uninstrument()
        provider.shutdown()


def record(wire: str, convs: list[Conversation], tracer: Any) -> dict[str, Any]:
    """The finished spans of running ``convs`` through the real SDK of ``wire``, one session each, and the
    messages each run had."""
    import anthropic
    import openai
    from openinference.instrumentation import using_session

    ran = {}
    server_class = FakeOpenAIServer if wire == "openai" else FakeAnthropicServer
    with server_class(recordings=convs) as server:
        for conv in convs:
            with using_session(f"{wire}-{conv.id}"):
                if wire == "openai":
                    with openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0) as client:
                        ran[f"{wire}-{conv.id}"] = run_agent(conv, openai_call(client, conv))
                else:
                    with anthropic.Anthropic(base_url=server.url, api_key="k", max_retries=0) as client:
                        ran[f"{wire}-{conv.id}"] = run_agent(conv, anthropic_call(client, conv))
    spans = list(tracer.get_finished_spans())
    tracer.clear()
    return {"spans": spans, "ran": ran}


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def phoenix_row(span: dict[str, Any]) -> dict[str, Any]:
    """A span as a row of Phoenix's ``get_spans_dataframe``: ``context.*``, ``span_kind``, ``start_time`` as a
    timestamp, and ``attributes.*`` columns whose keys stop at the first list index, each list item an object whose
    own keys are dotted again up to the next index (Phoenix's ``_flatten_semantic_conventions``)."""

    def put(node: dict[str, Any], parts: list[str], value: Any) -> None:
        k = next((i for i, p in enumerate(parts) if p.isdigit()), None)
        if k is None:
            node[".".join(parts)] = value
            return
        items = node.setdefault(".".join(parts[:k]), [])
        index = int(parts[k])
        while len(items) <= index:
            items.append({})
        put(items[index], parts[k + 1 :], value)

    attributes: dict[str, Any] = {}
    for key, value in span["attributes"].items():
        if key != "openinference.span.kind":
            put(attributes, key.split("."), value)
    row = {
        "name": span["name"],
        "span_kind": span["attributes"]["openinference.span.kind"],
        "parent_id": span["parent_id"],
        "start_time": datetime.fromisoformat(span["start_time"]),
        "end_time": datetime.fromisoformat(span["end_time"]),
        "status_code": span["status"]["status_code"],
        "context.span_id": span["context"]["span_id"],
        "context.trace_id": span["context"]["trace_id"],
    }
    return row | {f"attributes.{k}": v for k, v in attributes.items()}


def otlp_document(spans: list[Any]) -> dict[str, Any]:
    """Finished spans as one OTLP JSON document, as the OpenTelemetry Collector's file exporter writes a batch:
    the SDK's own protobuf encoding in protobuf's JSON mapping, the ids in hex as OTLP/JSON wants them (protobuf's
    mapping would write bytes in base64)."""
    from google.protobuf.json_format import MessageToDict
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    document = MessageToDict(encode_spans(spans))
    for resource in document["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            for span in scope["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
    return document


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
@pytest.mark.parametrize("shape", ["sdk", "phoenix", "otlp"])
def test_spans_of_the_real_instrumentation_read_back_and_replay(
    wire: str, shape: str, tracer: Any, tau_conversations: list[Conversation], tmp_path: Path
) -> None:
    convs = tool_conversations(tau_conversations, 2)
    captured = record(wire, convs, tracer)
    spans = [json.loads(s.to_json(indent=None)) for s in captured["spans"]]
    assert len(spans) == sum(1 for c in convs for m in c.messages if m.role == "assistant")
    if shape == "sdk":
        path = write_jsonl(tmp_path / "spans.jsonl", spans)
    elif shape == "otlp":
        half = len(captured["spans"]) // 2  # two batches, a conversation's calls in both
        path = write_jsonl(tmp_path / "otlp.jsonl", [otlp_document(captured["spans"][:half]),
                                                      otlp_document(captured["spans"][half:])])  # fmt: skip
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = tmp_path / "spans.parquet"
        pq.write_table(pa.Table.from_pylist([phoenix_row(s) for s in spans]), path)
    for fmt in ("openinference", "auto"):
        good, bad = de.read_conversations(path, message_format=fmt, metadata=["llm.model_name"]).load()  # type: ignore[arg-type]
        assert bad == []
        assert [c.id for c in good] == [f"{wire}-{c.id}" for c in convs]
        for conv, original in zip(good, convs, strict=True):
            assert canonical(conv.messages) == canonical(captured["ran"][conv.id])
            assert len(conv.calls) == sum(1 for m in original.messages if m.role == "assistant")
            assert [t.name for t in conv.tools] == [t.name for t in original.tools]
            assert conv.tools[0].parameters == original.tools[0].parameters
            assert conv.metadata == {"model_name": MODEL if wire == "openai" else CLAUDE}
    server_class = FakeOpenAIServer if wire == "openai" else FakeAnthropicServer
    with server_class(recordings=good) as server:
        options = {"base_url": server.base_url if wire == "openai" else server.url, "api_key": "k"}
        model = MODEL if wire == "openai" else CLAUDE
        result = de.run(
            conversations=de.read_conversations(path, message_format="openinference"),
            baseline=de.Variant(model=f"{wire}:{model}", provider_options=options),
            candidate=de.Variant(model=f"{wire}:{model}", provider_options=options),
            out=tmp_path / "run",
        )
    assert result.counts.errors == 0
    assert result.counts.pairs > 0


def test_spans_cut_at_the_sdks_default_attribute_limit_are_errors_saying_so(
    tau_conversations: list[Conversation], tmp_path: Path
) -> None:
    import openai
    from openinference.instrumentation.openai import OpenAIInstrumentor
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    # A long conversation: its late calls' spans have more than 128 attributes.
    conv = max(tool_conversations(tau_conversations, 10), key=lambda c: len(c.messages))
    exporter, provider = InMemorySpanExporter(), TracerProvider()  # the SDK's defaults: 128 attributes a span
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        with FakeOpenAIServer(recordings=[conv]) as server, openai.OpenAI(base_url=server.base_url, api_key="k") as c:
            run_agent(conv, openai_call(c, conv))
    finally:
        instrumentor.uninstrument()
        provider.shutdown()
    path = write_jsonl(
        tmp_path / "spans.jsonl", [json.loads(s.to_json(indent=None)) for s in exporter.get_finished_spans()]
    )
    good, bad = de.read_conversations(path, message_format="openinference").load()
    assert bad  # the long calls' spans lost their first messages
    assert all("OTEL_ATTRIBUTE_COUNT_LIMIT" in e.reason and e.field.startswith("llm.") for e in bad)
    assert all(len(c.messages) < len(conv.messages) for c in good)  # what is read is the early calls, whole


def span(**attributes: Any) -> dict[str, Any]:
    base = {"openinference.span.kind": "LLM", "llm.input_messages.0.message.role": "user",
            "llm.input_messages.0.message.content": "hi", "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.content": "hello"}  # fmt: skip
    attrs = {k: v for k, v in (base | attributes).items() if v is not None}
    return {"context": {"trace_id": "0x1", "span_id": "0xa"}, "start_time": "2026-01-01T00:00:00Z",
            "attributes": attrs}  # fmt: skip


def test_a_span_cut_at_the_attribute_limit_is_an_error_naming_the_missing_message(tmp_path: Path) -> None:
    first = {"llm.input_messages.0.message.role": None, "llm.input_messages.0.message.content": None}
    cut = span(**first, **{"llm.input_messages.1.message.role": "user",
                           "llm.input_messages.1.message.content": "again"})  # fmt: skip
    _, [error] = de.read_conversations(write_jsonl(tmp_path / "s.jsonl", [cut]), message_format="openinference").load()
    assert (error.record, error.field) == ("line 1, span 0xa", "llm.input_messages.0")
    assert "OTEL_ATTRIBUTE_COUNT_LIMIT" in error.reason


def test_a_cut_span_with_its_request_body_reads_the_body(tmp_path: Path) -> None:
    body = {"model": "m", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]}
    cut = span(**{"llm.input_messages.0.message.role": None, "llm.input_messages.0.message.content": None,
                  "llm.input_messages.1.message.role": "user", "input.value": json.dumps(body)})  # fmt: skip
    [conv], _ = de.read_conversations(write_jsonl(tmp_path / "s.jsonl", [cut]), message_format="openinference").load()
    assert [m.content for m in conv.messages] == ["Be brief.", "hi", "hello"]


@pytest.mark.parametrize(
    ("attributes", "field"),
    [
        ({"llm.input_messages.0.message.role": "robot"}, "llm.input_messages[0].role"),
        ({"llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "f",
          "llm.output_messages.0.message.content": None}, "llm.output_messages[0].tool_calls[0].id"),
        ({"llm.input_messages.0.message.contents.0.message_content.type": "video"},
         "llm.input_messages.0.message.contents.0.message_content.type"),
        ({"llm.tools.0.tool.json_schema": '{"description": "no name"}'}, "llm.tools[0]"),
        ({"llm.input_messages.0.message.role": None, "llm.input_messages.0.message.content": None},
         "llm.input_messages"),
    ],
)  # fmt: skip
def test_a_bad_span_is_an_error_naming_the_line_span_and_attribute(
    attributes: dict[str, Any], field: str, tmp_path: Path
) -> None:
    path = write_jsonl(tmp_path / "s.jsonl", [span(**attributes), "not a span"])
    good, bad = de.read_conversations(path, message_format="openinference").load()
    assert good == []
    assert [(e.source, e.record, e.field) for e in bad] == [(str(path), "line 1, span 0xa", field),
                                                            (str(path), "line 2", "")]  # fmt: skip


def test_only_llm_spans_are_calls_and_other_formats_are_not_claimed() -> None:
    chain = span(**{"openinference.span.kind": "CHAIN"})
    assert list(FORMAT.calls([("line 1", chain)], "s")) == []
    assert FORMAT.looks_like(span())
    otel = {"attributes": {"gen_ai.operation.name": "chat", "llm.request.type": "chat"}, "context": {}}
    langfuse = {"type": "GENERATION", "traceId": "t", "startTime": "2026-01-01T00:00:00Z", "input": []}
    langsmith = {"run_type": "llm", "trace_id": "t", "inputs": {}}
    assert not any(FORMAT.looks_like(r) for r in (otel, langfuse, langsmith, {"messages": []}))
    assert detect_trace_format(span()) == "openinference"


keys = st.text("abcxyz_", min_size=1, max_size=4)
leaves = st.text(max_size=5) | st.integers() | st.booleans()


def trees(depth: int = 3) -> st.SearchStrategy[Any]:
    """Nested objects and lists, none empty (flattening leaves no key for an empty one), ``depth`` levels deep."""
    if depth == 0:
        return leaves
    inner = trees(depth - 1)
    return leaves | st.lists(inner, min_size=1, max_size=3) | st.dictionaries(keys, inner, min_size=1, max_size=3)


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """OpenInference's flattening: objects to dotted keys, lists to index parts."""
    if isinstance(node, dict):
        items = node.items()
    elif isinstance(node, list):
        items = ((str(i), v) for i, v in enumerate(node))
    else:
        return {prefix: node}
    out: dict[str, Any] = {}
    for k, v in items:
        out |= flatten(v, f"{prefix}.{k}" if prefix else k)
    return out


@given(st.dictionaries(keys, trees(), min_size=1, max_size=4))
def test_unflattening_undoes_openinference_flattening(tree: dict[str, Any]) -> None:
    assert unflatten(flatten(tree)) == tree


def test_a_record_that_is_no_span_is_an_error_and_other_instrumentations_spans_pass(tmp_path: Path) -> None:
    http = {"context": {"trace_id": "0x1", "span_id": "0xb"}, "attributes": {"http.method": "POST"}}
    path = write_jsonl(tmp_path / "s.jsonl", [span(), http, {"id": "x", "messages": []}])
    good, bad = de.read_conversations(path, message_format="openinference").load()
    assert len(good) == 1
    assert [(e.record, e.field) for e in bad] == [("line 3", "attributes")]
