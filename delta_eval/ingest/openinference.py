"""Read OpenInference spans (Arize Phoenix, the ``openinference-instrumentation-*`` packages) as model calls.

An LLM span (``openinference.span.kind`` = ``LLM``) is one model call: ``llm.input_messages`` what was sent,
``llm.output_messages`` the answer, ``llm.tools`` the tools offered (each a ``tool.json_schema``, OpenAI's or
Anthropic's spelling), ``llm.model_name`` and ``llm.invocation_parameters``. A message has ``message.role``,
``message.content`` or ``message.contents`` (parts: ``message_content.type``/``text``/``image``),
``message.tool_calls`` (``tool_call.id``, ``tool_call.function.name``/``arguments``) and, on a tool result,
``message.tool_call_id``. Where the messages are missing or incomplete, the request body in ``input.value`` (an
OpenAI or Anthropic request, or plain text) and the response in ``output.value`` are read instead. Spans of other
kinds (chains, tools, retrievers) are passed over.

Calls are grouped by ``session.id``, else by trace id, and ordered by start time.

Spans are accepted as the OpenTelemetry SDK holds them (``ReadableSpan.to_json()``: ``context.trace_id``,
``start_time``, ``attributes`` with flat dotted keys), as OTLP JSON documents (``resourceSpans``, as the
OpenTelemetry Collector's file exporter writes them) and as Phoenix exports them (``get_spans_dataframe`` rows:
``context.span_id``, ``span_kind``, ``start_time``, columns ``attributes.llm.input_messages`` holding lists of
``{"message.role": ...}`` objects), from JSONL or Parquet.

The SDK keeps at most 128 attributes per span unless ``OTEL_ATTRIBUTE_COUNT_LIMIT`` says otherwise, and drops the
oldest first: a long conversation's span loses its first messages and its ``input.value``. Such a span is an error
naming the missing message, never a conversation silently cut short.

Example:
    >>> span = {"context": {"trace_id": "0xab", "span_id": "0x01"}, "start_time": "2026-01-01T00:00:00Z",
    ...         "attributes": {"openinference.span.kind": "LLM", "session.id": "s1",
    ...                        "llm.input_messages.0.message.role": "user",
    ...                        "llm.input_messages.0.message.content": "hi",
    ...                        "llm.output_messages.0.message.role": "assistant",
    ...                        "llm.output_messages.0.message.content": "hello"}}
    >>> [c] = FORMAT.calls([("line 1", span)], "spans.jsonl")
    >>> c.conversation, c.label, [m.content for m in c.call.input + c.call.output]
    ('s1', 'line 1, span 0x01', ['hi', 'hello'])
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from delta_eval.chat_format import parse_messages
from delta_eval.exceptions import RecordError
from delta_eval.ingest.model_calls import RecordedCall
from delta_eval.ingest.native_base import Err, arguments_json, placeholder
from delta_eval.ingest.trace_fields import (
    GAP,
    answer_messages,
    as_json,
    chat_messages,
    instant,
    is_list,
    tool_specs,
    unflatten,
)
from delta_eval.ingest.traces import TracedCall, TraceFormat
from delta_eval.paths import MISSING, get_path
from delta_eval.schema import Message, ToolSpec

__all__ = ["FORMAT", "looks_like", "model_calls"]

_KIND = "openinference.span.kind"
_ROLES = {"model": "assistant", "ai": "assistant", "human": "user"}
#: Why a flattened message list can skip an index: the SDK dropped the attributes.
_DROPPED = (
    "is missing: the span's attributes were cut, most likely at the OpenTelemetry SDK's limit (128 attributes per "
    "span unless OTEL_ATTRIBUTE_COUNT_LIMIT raises it), which drops the oldest first; raise the limit where the "
    "spans are recorded"
)


def _otlp_value(value: Any) -> Any:
    """An OTLP JSON ``AnyValue`` (``{"stringValue": ...}``) as a plain value."""
    if not isinstance(value, Mapping):
        return value
    for key in ("stringValue", "boolValue", "doubleValue"):
        if key in value:
            return value[key]
    if "intValue" in value:
        number = value["intValue"]  # int64 is a string in OTLP JSON
        return int(number) if isinstance(number, int) or (isinstance(number, str) and number.isdigit()) else number
    listed = value.get("arrayValue")
    if isinstance(listed, Mapping) and is_list(listed.get("values")):
        return [_otlp_value(v) for v in listed["values"]]
    return None


def _flat_attributes(record: Mapping[str, Any]) -> dict[str, Any]:
    """The span's attributes with their keys as recorded: an ``attributes`` object (or OTLP's list of key-value
    pairs), and the ``attributes.*`` columns of a Phoenix dataframe."""
    found: dict[str, Any] = {}
    raw = record.get("attributes")
    if isinstance(raw, Mapping):
        found.update(raw)
    elif is_list(raw):
        found.update((a["key"], _otlp_value(a.get("value"))) for a in raw
                     if isinstance(a, Mapping) and isinstance(a.get("key"), str))  # fmt: skip
    found.update((k[len("attributes.") :], v) for k, v in record.items()
                 if isinstance(k, str) and k.startswith("attributes."))  # fmt: skip
    return found


def _field(record: Mapping[str, Any], *paths: str) -> Any:
    """The first of ``paths`` the span has, as a nested path or as a flat column (``context.span_id``)."""
    for path in paths:
        value = record.get(path)
        if value is None:
            value = get_path(record, path)
        if value is not MISSING and value is not None:
            return value
    return None


def looks_like(record: Any) -> bool:
    """Whether ``record`` is an OpenInference span: it says its ``openinference.span.kind``, or is a Phoenix row
    (``span_kind`` beside ``attributes.llm.*`` columns), or is an OTLP JSON document whose first spans say so."""
    if isinstance(record, Mapping) and "resourceSpans" in record:
        return any(_is_span(span) for _, span in itertools.islice(_otlp_spans(record, "", ""), 100))
    return _is_span(record)


def _is_span(record: Any) -> bool:
    if not isinstance(record, Mapping):
        return False
    attributes = record.get("attributes")
    if isinstance(attributes, Mapping) and (_KIND in attributes or isinstance(attributes.get("openinference"),
                                                                                 Mapping)):  # fmt: skip
        return True
    if is_list(attributes) and any(isinstance(a, Mapping) and a.get("key") == _KIND for a in attributes):
        return True
    if f"attributes.{_KIND}" in record:
        return True
    return "span_kind" in record and any(str(k).startswith("attributes.llm.") for k in record)


def _text_parts(parts: Any, err: Err, field: str) -> tuple[str | None, list[dict[str, Any]]]:
    """The text of ``message.contents`` (media as placeholders) and the tool calls some instrumentors list there."""
    if not is_list(parts):
        raise err(field, f"must be a list of content parts, not {type(parts).__name__}")
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for j, part in enumerate(parts):
        if not isinstance(part, Mapping):
            raise err(f"{field}.{j}", "a content part must be an object")
        if isinstance(part.get("tool_call"), Mapping):
            calls.append(part["tool_call"])
            continue
        content = part.get("message_content", part)
        kind = content.get("type") if isinstance(content, Mapping) else None
        if kind == "text" or (kind is None and isinstance(content, Mapping) and "text" in content):
            texts.append(str(content.get("text") or ""))
        elif kind in ("image", "audio", "file", "document"):
            url = get_path(content, "image.image.url")
            media = (
                url.split(";")[0].removeprefix("data:") if isinstance(url, str) and url.startswith("data:") else None
            )
            texts.append(placeholder(kind, media))
        elif kind in ("tool_use", "tool_result"):
            continue  # an Anthropic block the instrumentor also wrote as a tool call or a tool message
        else:
            raise err(f"{field}.{j}.message_content.type", f"unsupported content part {kind!r}")
    return ("".join(texts) if texts else None), calls


def _chat_message(raw: Any, err: Err, field: str) -> dict[str, Any]:
    """One OpenInference message as an OpenAI chat message (for :func:`~delta_eval.chat_format.parse_messages`)."""
    if raw is GAP:
        raise err(field, _DROPPED)
    message = raw.get("message", raw) if isinstance(raw, Mapping) else None
    if not isinstance(message, Mapping):
        raise err(field, "a message must be an object with message.role")
    role = message.get("role")
    if role is None:  # the role is written first: a message without it lost its first attributes
        raise err(f"{field}.message.role", _DROPPED)
    out: dict[str, Any] = {"role": _ROLES.get(role, role) if isinstance(role, str) else role}
    content = message.get("content")
    part_calls: list[dict[str, Any]] = []
    if message.get("contents") is not None:
        text, part_calls = _text_parts(message["contents"], err, f"{field}.message.contents")
        content = text if content is None else content
    out["content"] = content
    calls = message.get("tool_calls")
    if calls is None:
        calls = [{"tool_call": c} for c in part_calls]
    if calls:
        if not is_list(calls):
            raise err(f"{field}.message.tool_calls", "must be a list")
        out["tool_calls"] = []
        for k, c in enumerate(calls):
            call = c.get("tool_call", c) if isinstance(c, Mapping) else None
            where = f"{field}.message.tool_calls.{k}"
            if call is GAP or not isinstance(call, Mapping):
                raise err(where, _DROPPED if call is GAP else "a tool call must be an object")
            fn: Mapping[str, Any] = call["function"] if isinstance(call.get("function"), Mapping) else {}
            args = arguments_json(fn.get("arguments"), err, f"{where}.tool_call.function.arguments")
            out["tool_calls"].append({"id": call.get("id"), "function": {"name": fn.get("name"), "arguments": args}})
    for key in ("tool_call_id", "name"):
        if message.get(key) is not None:
            out[key] = message[key]
    if out["role"] == "tool" and out.get("content") is None:
        out["content"] = ""  # a tool that returned nothing: the instrumentor leaves the content out
    return out


def _messages(raw: Any, err: Err, field: str, *, answer: bool = False) -> tuple[Message, ...]:
    chat = [_chat_message(m, err, f"{field}.{i}") for i, m in enumerate(raw)]
    return parse_messages(chat, source=err.source, record=err.record, field=field, answer=answer)


def _request_messages(body: Any, err: Err) -> tuple[Message, ...] | None:
    """The messages of the request in ``input.value``: an OpenAI or Anthropic body, a message list, or text."""
    if isinstance(body, str):
        return (Message(role="user", content=body),) if body else None
    if is_list(body):
        return chat_messages(body, err, "input.value")
    if isinstance(body, Mapping) and is_list(body.get("messages")):
        return chat_messages(body["messages"], err, "input.value.messages", system=body.get("system"))
    return None


def _openinference_tools(raw: Sequence[Any], err: Err) -> tuple[ToolSpec, ...]:
    schemas = []
    for k, t in enumerate(raw):
        schema = get_path(t, "tool.json_schema") if isinstance(t, Mapping) else MISSING
        if t is GAP or schema is MISSING:
            raise err(f"llm.tools.{k}", _DROPPED if t is GAP else "a tool needs its tool.json_schema")
        schemas.append(schema)
    return tool_specs(schemas, err, "llm.tools")


def _tools(llm: Mapping[str, Any], body: Any, err: Err) -> tuple[ToolSpec, ...] | None:
    if is_list(llm.get("tools")):
        return _openinference_tools(llm["tools"], err)
    params = as_json(llm.get("invocation_parameters"))
    for where, holder in (("llm.invocation_parameters.tools", params), ("input.value.tools", body)):
        if isinstance(holder, Mapping) and is_list(holder.get("tools")):
            return tool_specs(holder["tools"], err, where)
    return None


def _call(attributes: Mapping[str, Any], err: Err) -> RecordedCall:
    llm: Mapping[str, Any] = attributes["llm"] if isinstance(attributes.get("llm"), Mapping) else {}
    body = as_json(get_path(attributes, "input.value"))
    raw_input = llm.get("input_messages")
    if is_list(raw_input) and raw_input and GAP not in raw_input:
        sent = _messages(raw_input, err, "llm.input_messages")
    else:
        # The messages are missing or cut: the request body, when the span still has it, holds them all.
        from_body = _request_messages(body, err) if body is not MISSING else None
        if from_body is None:
            if is_list(raw_input) and GAP in raw_input:
                raise err(f"llm.input_messages.{raw_input.index(GAP)}", _DROPPED)
            raise err("llm.input_messages", "the span records no input messages (and no input.value to read)")
        sent = from_body
    raw_output = llm.get("output_messages")
    if is_list(raw_output) and raw_output:
        answer = _messages(raw_output, err, "llm.output_messages", answer=True)
    else:
        answer = answer_messages(as_json(get_path(attributes, "output.value")), err, "output.value")
    return RecordedCall(input=sent, output=answer, tools=_tools(llm, body, err))


def _traced(record: Any, label: str, source: str, position: int) -> TracedCall | None:
    if not isinstance(record, Mapping):
        raise RecordError(source, label, "", f"a span must be an object, not {type(record).__name__}")
    flat = _flat_attributes(record)
    if not flat and not isinstance(record.get("context"), Mapping):
        raise RecordError(
            source, label, "attributes", f"not a span: it has no attributes (found {sorted(map(str, record))[:8]})"
        )
    attributes = unflatten(flat)
    kind = get_path(attributes, _KIND)
    if kind is MISSING:
        kind = record.get("span_kind")
    if str(kind).upper() != "LLM":
        return None  # chains, tools, retrievers, agents: not a model call
    span_id = _field(record, "context.span_id", "span_id", "spanId", "id")
    trace_id = _field(record, "context.trace_id", "trace_id", "traceId")
    where = f"{label}, span {span_id}" if span_id is not None else label
    call = _call(attributes, Err(source, where, ""))
    session = get_path(attributes, "session.id")
    key = session if session is not MISSING else trace_id if trace_id is not None else where
    # Kept as JSON text by the instrumentors; parsed, ``metadata`` paths can read into them.
    for holder, name in ((attributes, "metadata"), (attributes.get("llm"), "invocation_parameters")):
        if isinstance(holder, dict) and name in holder:
            holder[name] = as_json(holder[name])
    resource = record.get("resource")
    resource_attributes = resource.get("attributes") if isinstance(resource, Mapping) else None
    own = {k: v for k, v in record.items() if k != "attributes" and not str(k).startswith("attributes.")}
    fields = {**unflatten(own), **(unflatten(resource_attributes) if isinstance(resource_attributes, Mapping)
                                   else {}), **attributes}  # fmt: skip
    start = instant(_field(record, "start_time", "startTime", "startTimeUnixNano"))
    order = (start if start is not None else float("inf"), position)
    return TracedCall(conversation=str(key), order=order, label=where, call=call, fields=fields)


def _otlp_spans(document: Mapping[str, Any], label: str, source: str) -> Iterator[tuple[str, Any]]:
    """The spans of an OTLP JSON document (``resourceSpans`` > ``scopeSpans`` > ``spans``, as the OpenTelemetry
    Collector's file exporter writes a batch), each with its resource's attributes, as ``(label, span)``."""
    for i, resource_spans in enumerate(document["resourceSpans"] if is_list(document["resourceSpans"]) else ()):
        if not isinstance(resource_spans, Mapping):
            where = f"{label}, resourceSpans[{i}]"
            yield where, RecordError(source, where, "", "a resourceSpans item must be an object")
            continue
        resource = resource_spans.get("resource")
        attributes = resource.get("attributes") if isinstance(resource, Mapping) else None
        kept = {a["key"]: _otlp_value(a.get("value")) for a in attributes if isinstance(a, Mapping)
                and isinstance(a.get("key"), str)} if is_list(attributes) else {}  # fmt: skip
        scopes = resource_spans.get("scopeSpans")
        for j, scope in enumerate(scopes if is_list(scopes) else ()):
            spans = scope.get("spans") if isinstance(scope, Mapping) else None
            for k, span in enumerate(spans if is_list(spans) else ()):
                where = f"{label}, resourceSpans[{i}].scopeSpans[{j}].spans[{k}]"
                if not isinstance(span, Mapping):
                    yield where, span
                    continue
                yield where, {**span, "context": {"trace_id": span.get("traceId"), "span_id": span.get("spanId")},
                              "resource": {"attributes": kept}}  # fmt: skip


def _spans(records: Iterable[tuple[str, Any]], source: str) -> Iterator[tuple[str, Any]]:
    for label, record in records:
        if isinstance(record, Mapping) and "resourceSpans" in record:
            yield from _otlp_spans(record, label, source)
        else:
            yield label, record


def model_calls(records: Iterable[tuple[str, Any]], source: str) -> Iterator[TracedCall | RecordError]:
    """The model calls of OpenInference spans ``(label, span)`` (a record may also be an OTLP JSON document of
    many spans): one per LLM span, a :class:`RecordError` for a span that cannot be read (naming the line, the
    span id and the attribute)."""
    for position, (label, record) in enumerate(_spans(records, source)):
        if isinstance(record, RecordError):
            yield record
            continue
        try:
            traced = _traced(record, label, source, position)
        except RecordError as exc:
            yield exc
            continue
        if traced is not None:
            yield traced


#: OpenInference spans as a trace format (``message_format="openinference"``).
FORMAT = TraceFormat(calls=model_calls, looks_like=looks_like)
