"""Conversations written as the tracing tools export them, for benchmarks, examples and tests: each assistant
message a model call that sent the whole history before it (as agents do), in the shape of an OpenTelemetry GenAI
span (OTLP/JSON), an OpenInference span (flat attributes, as the OpenTelemetry SDK serialises a span), a Langfuse
generation (public API item) and a LangSmith ``llm`` run.

These are written from the formats' own documentation, independently of the readers in :mod:`delta_eval.ingest`;
the readers' own tests read what the real instrumentation libraries record.

Example:
    >>> from delta_eval.schema import Conversation, Message
    >>> conv = Conversation(id="c1", messages=(Message(role="system", content="Be brief."),
    ...     Message(role="user", content="hi"), Message(role="assistant", content="hello")))
    >>> [r["run_type"] for r in trace_records("langsmith", [conv])]
    ['llm']
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from delta_eval.schema import Conversation, Message

__all__ = ["TRACE_EXPORTS", "model_calls", "otel_spans", "otlp_documents", "trace_records"]

_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def model_calls(conv: Conversation) -> Iterator[tuple[str | None, tuple[Message, ...], Message]]:
    """Each assistant message as a model call: the system prompt, the other messages sent before it, the answer."""
    system = "\n\n".join(m.content or "" for m in conv.messages if m.role == "system") or None
    for j, m in enumerate(conv.messages):
        if m.role == "assistant":
            yield system, tuple(x for x in conv.messages[:j] if x.role != "system"), m


def _chat(m: Message) -> dict[str, Any]:
    """A message in OpenAI chat form (what Langfuse and LangSmith record for an OpenAI call)."""
    out: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.tool_calls:
        out["tool_calls"] = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                             for c in m.tool_calls]  # fmt: skip
    if m.role == "tool":
        out["tool_call_id"] = m.tool_call_id
    return out


def _tools(conv: Conversation) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": t.name, "description": t.description,
                                              "parameters": t.parameters}} for t in conv.tools]  # fmt: skip


def _parts(m: Message) -> dict[str, Any]:
    """A message in the GenAI conventions' parts form (``gen_ai.input.messages``)."""
    parts: list[dict[str, Any]] = []
    if m.role == "tool":
        parts.append({"type": "tool_call_response", "id": m.tool_call_id, "response": m.content})
    elif m.content:
        parts.append({"type": "text", "content": m.content})
    parts += [{"type": "tool_call", "id": c.id, "name": c.name, "arguments": json.loads(c.arguments or "{}")}
              for c in m.tool_calls]  # fmt: skip
    return {"role": m.role, "parts": parts}


def _attr(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    return {"key": key, "value": {"stringValue": value}}


def otel_spans(k: int, conv: Conversation) -> Iterator[dict[str, Any]]:
    """Conversation ``k``'s model calls as OTLP/JSON ``chat`` spans with the current GenAI attributes, each followed
    by an ``execute_tool`` span when it called a tool (as the instrumentations write them)."""
    tools = [{"type": "function", "name": t.name, "description": t.description, "parameters": t.parameters}
             for t in conv.tools]  # fmt: skip
    for n, (system, sent, answer) in enumerate(model_calls(conv)):
        start = 1_767_225_600_000_000_000 + k * 1_000_000_000 + n * 1_000_000
        attrs: dict[str, Any] = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
                                 "gen_ai.request.model": "gpt-4o", "gen_ai.conversation.id": conv.id}  # fmt: skip
        if system is not None:
            attrs["gen_ai.system_instructions"] = json.dumps([{"type": "text", "content": system}])
        if tools:
            attrs["gen_ai.tool.definitions"] = json.dumps(tools)
        attrs["gen_ai.input.messages"] = json.dumps([_parts(m) for m in sent])
        attrs["gen_ai.output.messages"] = json.dumps([{**_parts(answer), "finish_reason": "stop"}])
        yield {"traceId": f"{k:032x}", "spanId": f"{k * 64 + n:016x}", "name": "chat gpt-4o", "kind": 3,
               "startTimeUnixNano": str(start), "endTimeUnixNano": str(start + 500_000),
               "attributes": [_attr(a, v) for a, v in attrs.items()], "status": {}}  # fmt: skip
        if answer.tool_calls:
            yield {"traceId": f"{k:032x}", "spanId": f"{k * 64 + 32 + n:016x}", "name": "execute_tool", "kind": 1,
                   "startTimeUnixNano": str(start + 600_000), "endTimeUnixNano": str(start + 700_000),
                   "attributes": [_attr("gen_ai.operation.name", "execute_tool")], "status": {}}  # fmt: skip


def otlp_documents(
    conversations: Iterable[Conversation], *, batch: int = 100, live: int = 8
) -> Iterator[dict[str, Any]]:
    """OTLP/JSON export requests as the Collector's file exporter writes them, one a line: ``batch`` spans each,
    the spans of ``live`` conversations in flight at once interleaved, as a batch processor fed by concurrent agents
    has them."""
    resource = {"attributes": [_attr("service.name", "support-agent")]}
    todo = iter(enumerate(conversations))
    pending: list[Iterator[dict[str, Any]]] = []
    spans: list[dict[str, Any]] = []
    more = True
    while more or pending:
        while more and len(pending) < live:
            nxt = next(todo, None)
            if nxt is None:
                more = False
            else:
                pending.append(otel_spans(*nxt))
        for stream in list(pending):
            span = next(stream, None)
            if span is None:
                pending.remove(stream)
            else:
                spans.append(span)
        if len(spans) >= batch or (not pending and not more and spans):
            yield {"resourceSpans": [{"resource": resource, "scopeSpans": [
                {"scope": {"name": "opentelemetry.instrumentation.openai_v2"}, "spans": spans}]}]}  # fmt: skip
            spans = []


def _flat(prefix: str, messages: Sequence[Message]) -> dict[str, Any]:
    """OpenInference's flattened message attributes (``llm.input_messages.0.message.role`` ...)."""
    out: dict[str, Any] = {}
    for i, m in enumerate(messages):
        at = f"{prefix}.{i}.message"
        out[f"{at}.role"] = m.role
        if m.content is not None:
            out[f"{at}.content"] = m.content
        if m.role == "tool" and m.tool_call_id:
            out[f"{at}.tool_call_id"] = m.tool_call_id
        for j, c in enumerate(m.tool_calls):
            out[f"{at}.tool_calls.{j}.tool_call.id"] = c.id
            out[f"{at}.tool_calls.{j}.tool_call.function.name"] = c.name
            out[f"{at}.tool_calls.{j}.tool_call.function.arguments"] = c.arguments
    return out


def _openinference(k: int, conv: Conversation) -> Iterator[dict[str, Any]]:
    for n, (system, sent, answer) in enumerate(model_calls(conv)):
        head = (Message(role="system", content=system),) if system is not None else ()
        attrs = {"openinference.span.kind": "LLM", "llm.model_name": "gpt-4o", "session.id": conv.id,
                 **_flat("llm.input_messages", (*head, *sent)), **_flat("llm.output_messages", (answer,))}  # fmt: skip
        for i, tool in enumerate(_tools(conv)):
            attrs[f"llm.tools.{i}.tool.json_schema"] = json.dumps(tool)
        start = _EPOCH + timedelta(seconds=k, milliseconds=n)
        context = {"trace_id": f"0x{k * 64 + n:032x}", "span_id": f"0x{k * 64 + n:016x}"}
        yield {"name": "ChatCompletion", "context": context,
               "start_time": start.isoformat(), "end_time": (start + timedelta(milliseconds=1)).isoformat(),
               "attributes": attrs}  # fmt: skip


def _langfuse(k: int, conv: Conversation) -> Iterator[dict[str, Any]]:
    for n, (system, sent, answer) in enumerate(model_calls(conv)):
        head = [{"role": "system", "content": system}] if system is not None else []
        start = (_EPOCH + timedelta(seconds=k, milliseconds=n)).isoformat().replace("+00:00", "Z")
        yield {"id": f"obs-{k}-{n}", "type": "GENERATION", "traceId": f"trace-{k}-{n}", "sessionId": conv.id,
               "startTime": start, "name": "OpenAI-generation", "model": "gpt-4o",
               "input": {"messages": [*head, *map(_chat, sent)], "tools": _tools(conv)},
               "output": _chat(answer)}  # fmt: skip


def _langsmith(k: int, conv: Conversation) -> Iterator[dict[str, Any]]:
    for n, (system, sent, answer) in enumerate(model_calls(conv)):
        head = [{"role": "system", "content": system}] if system is not None else []
        start = (_EPOCH + timedelta(seconds=k, milliseconds=n)).isoformat()
        yield {"id": f"run-{k}-{n}", "name": "ChatOpenAI", "run_type": "llm", "trace_id": f"trace-{k}-{n}",
               "start_time": start, "inputs": {"messages": [*head, *map(_chat, sent)], "tools": _tools(conv)},
               "outputs": {"choices": [{"index": 0, "message": _chat(answer), "finish_reason": "stop"}]},
               "extra": {"metadata": {"thread_id": conv.id}}}  # fmt: skip


def _otel(k: int, conv: Conversation) -> Iterator[dict[str, Any]]:
    resource = {"attributes": [_attr("service.name", "support-agent")]}
    scope = {"scope": {"name": "opentelemetry.instrumentation.openai_v2"}, "spans": list(otel_spans(k, conv))}
    yield {"resourceSpans": [{"resource": resource, "scopeSpans": [scope]}]}


_WRITERS = {"otel": _otel, "openinference": _openinference, "langfuse": _langfuse, "langsmith": _langsmith}

#: The trace formats :func:`trace_records` writes.
TRACE_EXPORTS: tuple[str, ...] = tuple(_WRITERS)


def trace_records(fmt: str, conversations: Iterable[Conversation]) -> Iterator[dict[str, Any]]:
    """The records of ``conversations`` in trace format ``fmt`` (one of :data:`TRACE_EXPORTS`), one per model call
    (``otel``: one OTLP export request per conversation; :func:`otlp_documents` interleaves them in batches)."""
    writer = _WRITERS[fmt]
    for k, conv in enumerate(conversations):
        yield from writer(k, conv)
