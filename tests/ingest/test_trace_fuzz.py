"""Any record, however damaged, read as a trace of any format is a model call, a record error naming the source and
record, or passed over: never an exception."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from delta_eval.exceptions import RecordError
from delta_eval.ingest.traces import TRACE_FORMATS, conversations_of, trace_format
from delta_eval.mapping import FieldMapping
from delta_eval.schema import Conversation

FORMATS = [f for f in ("openinference", "langfuse", "langsmith") if f in TRACE_FORMATS]
KEYS = [
    # OpenInference
    "attributes", "context", "trace_id", "span_id", "start_time", "span_kind", "openinference.span.kind",
    "llm.input_messages", "llm.input_messages.0.message.role", "llm.input_messages.0.message.content",
    "llm.input_messages.1.message.tool_calls.0.tool_call.id", "llm.output_messages.0.message.contents",
    "llm.tools.0.tool.json_schema", "input.value", "output.value", "session.id", "message.role", "key", "value",
    "resourceSpans", "scopeSpans", "spans", "spanId", "resource", "stringValue", "intValue", "arrayValue", "values",
    # Langfuse
    "type", "traceId", "startTime", "input", "output", "observations", "data", "sessionId", "modelParameters",
    "langfuse.observation.type", "langfuse.observation.input", "langfuse.observation.metadata",
    # LangSmith
    "run_type", "inputs", "outputs", "extra", "metadata", "thread_id", "messages", "generations", "choices",
    "message", "lc", "id", "kwargs", "tool_calls", "additional_kwargs", "args", "tools", "invocation_params",
    # shared
    "role", "content", "text", "name", "arguments", "function", "tool_call_id", "system", "tool_use_id",
]  # fmt: skip
VALUES = ["LLM", "llm", "GENERATION", "generation", "user", "assistant", "tool", "system", "tool_use", "text",
          "2026-01-01T00:00:00Z", "0", "[1]", '{"a": 1}', "HumanMessage"]  # fmt: skip
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.sampled_from(VALUES) | st.text(max_size=4),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.sampled_from(KEYS), kids, max_size=5),
    max_leaves=30,
)


messages = st.lists(st.dictionaries(st.sampled_from(KEYS), json_values, max_size=4) | json_values, max_size=4)
#: Records of each format's shape with anything inside: they reach the readers' message and tool parsing.
shaped = {
    "openinference": st.fixed_dictionaries(
        {"context": st.fixed_dictionaries({"span_id": st.just("0xa"), "trace_id": json_values}),
         "attributes": st.dictionaries(st.sampled_from(KEYS), json_values, max_size=6).map(
             lambda a: a | {"openinference.span.kind": "LLM"})}),
    "otlp": st.fixed_dictionaries({"resourceSpans": st.lists(st.fixed_dictionaries(
        {"resource": json_values, "scopeSpans": st.lists(st.fixed_dictionaries({"spans": st.lists(
            st.fixed_dictionaries({"traceId": json_values, "attributes": st.lists(st.fixed_dictionaries(
                {"key": st.sampled_from(KEYS), "value": st.dictionaries(st.sampled_from(KEYS), json_values,
                                                                       max_size=2)}), max_size=5)}) | json_values,
            max_size=3)}) | json_values, max_size=2)}), max_size=2)}),
    "langfuse": st.fixed_dictionaries(
        {"id": st.just("o1"), "type": st.just("GENERATION"), "traceId": st.just("t"), "startTime": json_values,
         "input": messages | st.fixed_dictionaries({"messages": messages, "tools": json_values}) | json_values,
         "output": json_values | st.dictionaries(st.sampled_from(KEYS), json_values, max_size=4)}),
    "langsmith": st.fixed_dictionaries(
        {"id": st.just("r1"), "run_type": st.just("llm"), "trace_id": st.just("t"),
         "inputs": st.fixed_dictionaries({"messages": messages | st.lists(messages, max_size=2)}) | json_values,
         "outputs": json_values | st.dictionaries(st.sampled_from(KEYS), json_values, max_size=4),
         "extra": json_values}),
}  # fmt: skip


@pytest.mark.parametrize("fmt", FORMATS)
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_record_reads_or_is_a_record_error(fmt: str, data: st.DataObject) -> None:
    extra = shaped["otlp"] if fmt == "openinference" else shaped[fmt]
    records = data.draw(st.lists(json_values | shaped[fmt] | extra, max_size=4))
    trace = trace_format(fmt)
    for r in records:
        trace.looks_like(r)
    labelled = [(f"line {i + 1}", r) for i, r in enumerate(records)]
    for label, item in conversations_of(trace.calls(labelled, "s.jsonl"), FieldMapping(), "s.jsonl"):
        assert isinstance(item, Conversation | RecordError), label
        if isinstance(item, RecordError):
            assert item.source == "s.jsonl"
            assert item.record.startswith("line ")
