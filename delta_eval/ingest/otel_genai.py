"""OpenTelemetry GenAI spans read as model calls (``message_format="otel"``), in the semantic conventions' own
vocabulary.

A model-call span (``gen_ai.operation.name`` ``chat``, ``generate_content`` or ``text_completion``; its name
``chat gpt-4o``) records one call to a model. What was sent and answered is found in one of these forms:

- **current conventions**: the attributes ``gen_ai.input.messages``, ``gen_ai.output.messages``,
  ``gen_ai.system_instructions`` and ``gen_ai.tool.definitions`` (JSON text, as the spec has them on spans, or
  already structured), holding parts-based messages: ``{"role", "parts": [{"type": "text", "content"},
  {"type": "tool_call", "id", "name", "arguments"}, {"type": "tool_call_response", "id", "response"},
  {"type": "reasoning", "content"}, blob/uri/file parts], "finish_reason"}``; the same attributes on a
  ``gen_ai.client.inference.operation.details`` event (a log record or span event) count as the span's;
- **older event form**: one event per message, ``gen_ai.system.message``, ``gen_ai.user.message``,
  ``gen_ai.assistant.message``, ``gen_ai.tool.message`` and ``gen_ai.choice`` (body ``content``, ``tool_calls``,
  ``id``; ``message`` in a choice), as span events or as log records carrying the span's id;
- **indexed attributes** (OpenLLMetry, widespread before the conventions had messages): ``gen_ai.prompt.N.role``,
  ``gen_ai.prompt.N.content``, ``gen_ai.prompt.N.tool_calls.M.name``, ``gen_ai.completion.N.*`` and the tools as
  ``llm.request.functions.N.*``.

Calls are grouped into conversations by ``gen_ai.conversation.id`` where a span has it, else by trace id, and
ordered by start time (:mod:`delta_eval.ingest.traces`). Other spans (``execute_tool``, ``invoke_agent``, HTTP...)
are skipped. The values ``id`` and ``metadata`` paths read are the span's attributes nested at their dots
(``gen_ai.request.model``, ``gen_ai.provider.name``, older ``gen_ai.system``), ``resource.*`` (the resource's
attributes: ``resource.service.name``) and ``trace_id``, ``span_id``, ``span_name``.

Records are either OTLP/JSON export requests, as the OpenTelemetry Collector's file exporter writes them (one
``{"resourceSpans": [...]}`` or ``{"resourceLogs": [...]}`` per line, ids in hex, attributes as
``[{"key", "value": {"stringValue": ...}}]``), each flattened into its spans and log records; or one span per row
(Parquet, JSONL, SQL) with ``trace_id``/``traceId``, ``span_id``/``spanId``, ``name``, ``start_time_unix_nano``/
``startTimeUnixNano`` (or a ``start_time`` timestamp) and ``attributes`` (a map, a struct, OTLP key-values or JSON
text) or flattened ``attributes.gen_ai....`` columns, ``resource.attributes``/``resource_attributes`` and
``events``; the ClickHouse exporter's columns (``TraceId``, ``SpanId``, ``SpanName``, ``Timestamp``,
``SpanAttributes``, ``ResourceAttributes``, ``Events.Name``/``Events.Timestamp``/``Events.Attributes``) are read
too. Log records of the older event form must be in the same source as their spans (a collector writing both
pipelines to one file does): a call is read from them once the source has been read.

The canonical schema is text-only: a media part becomes a placeholder (``[image: image/png]``); reasoning text is
kept as the answer's reasoning summary (provider ``otel``: no adapter sends it back).

Example:
    >>> span = {"traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174", "name": "chat gpt-4o",
    ...         "startTimeUnixNano": "1700000000000000000", "attributes": [
    ...     {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
    ...     {"key": "gen_ai.request.model", "value": {"stringValue": "gpt-4o"}},
    ...     {"key": "gen_ai.input.messages", "value": {"stringValue":
    ...         '[{"role": "user", "parts": [{"type": "text", "content": "hi"}]}]'}},
    ...     {"key": "gen_ai.output.messages", "value": {"stringValue":
    ...         '[{"role": "assistant", "parts": [{"type": "text", "content": "hello"}], "finish_reason": "stop"}]'}}]}
    >>> [c] = calls([("line 1", {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]})], "x.jsonl")
    >>> c.conversation, c.label, [m[1] for m in c.call.output], c.fields["gen_ai"]["request"]["model"]  # content
    ('5b8efff798038103d269b633813fc60c', 'line 1, span 0 (span id eee19b7ec3c1b174)', ['hello'], 'gpt-4o')
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any

import msgspec

from delta_eval.chat_format import parse_tools
from delta_eval.exceptions import RecordError
from delta_eval.ingest.model_calls import DraftMessage, DraftToolCall, RecordedCall, draft
from delta_eval.ingest.native_base import Err, arguments_json, placeholder
from delta_eval.ingest.otlp_json import ExportRecord, KeyValue, LazyMapping, ResourceSpans, decode_line
from delta_eval.ingest.otlp_json import Span as SpanStruct
from delta_eval.ingest.traces import TracedCall, TraceFormat
from delta_eval.schema import ReasoningState, ToolSpec

__all__ = ["FORMAT", "MODEL_OPERATIONS", "any_value", "calls", "looks_like"]

#: The ``gen_ai.operation.name`` of a span that is a call to a model (the rest, ``execute_tool``,
#: ``invoke_agent``, ``embeddings``..., are not replayed).
MODEL_OPERATIONS = frozenset({"chat", "generate_content", "text_completion"})
#: The provider named on reasoning read from a trace: no adapter is ``otel``, so none sends it back (a trace keeps
#: no signature), while the summary stays readable.
PROVIDER = "otel"

_INPUT, _OUTPUT = "gen_ai.input.messages", "gen_ai.output.messages"
_SYSTEM, _TOOLS = "gen_ai.system_instructions", "gen_ai.tool.definitions"
_OPERATION, _CONVERSATION = "gen_ai.operation.name", "gen_ai.conversation.id"
_DETAILS = "gen_ai.client.inference.operation.details"
_MESSAGE_ATTRIBUTES = (_INPUT, _OUTPUT, _SYSTEM, _TOOLS)
_MESSAGE_EVENTS = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
    "gen_ai.choice": "choice",
}
_MEDIA_PARTS = ("blob", "uri", "file")
_PROMPT, _COMPLETION, _FUNCTIONS = "gen_ai.prompt.", "gen_ai.completion.", "llm.request.functions."
# Where a flat span row keeps each field: the OTLP/JSON names, snake case, the ClickHouse exporter's columns.
_TRACE_ID = ("traceId", "trace_id", "TraceId", "context.trace_id")
_SPAN_ID = ("spanId", "span_id", "SpanId", "context.span_id")
_NAME = ("name", "span_name", "SpanName")
_START = ("startTimeUnixNano", "start_time_unix_nano", "start_time", "Timestamp", "timestamp")
_ATTRIBUTES = ("attributes", "SpanAttributes", "span_attributes")
_RESOURCE = ("resource_attributes", "ResourceAttributes")
_ISO_FRACTION = re.compile(r"^(\d{4}-\d\d-\d\d[T ]\d\d:\d\d(?::\d\d)?)(?:\.(\d+))?(.*)$")


class _Bad(Exception):
    """A field of a span that cannot be read; the span's error names it."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(reason)
        self.field, self.reason = field, reason


def any_value(value: Any) -> Any:
    """An OTLP/JSON ``AnyValue`` (``{"stringValue": "x"}``, ``{"intValue": "3"}``, ``{"arrayValue": {"values":
    [...]}}``, ``{"kvlistValue": {"values": [{"key", "value"}]}}``, ``{"bytesValue": base64}``...) as Python;
    ``ValueError`` for one that is not. 64-bit integers come as strings in OTLP/JSON, doubles may be ``"NaN"``.

    Example:
        >>> any_value({"kvlistValue": {"values": [{"key": "n", "value": {"intValue": "3"}},
        ...                                       {"key": "xs", "value": {"arrayValue": {"values": [{}]}}}]}})
        {'n': 3, 'xs': [None]}
    """
    if not isinstance(value, Mapping):
        raise ValueError(f"an attribute value must be an OTLP AnyValue object, not {type(value).__name__}")
    if not value:
        return None  # an AnyValue with nothing set: the empty value
    if len(value) != 1:
        raise ValueError(f"an AnyValue holds one value, not {len(value)} ({', '.join(sorted(value))})")
    ((kind, raw),) = value.items()
    if kind == "stringValue" and isinstance(raw, str):
        return raw
    if kind == "boolValue" and isinstance(raw, bool):
        return raw
    try:
        if kind == "intValue" and isinstance(raw, int | str) and not isinstance(raw, bool):
            return int(raw)
        if kind == "doubleValue" and isinstance(raw, int | float | str) and not isinstance(raw, bool):
            return float(raw)  # "NaN", "Infinity" and "-Infinity" are how OTLP/JSON writes those
    except ValueError:
        raise ValueError(f"{kind} {raw!r} is not a number") from None
    if kind == "arrayValue" and isinstance(raw, Mapping):
        return [any_value(v) for v in raw.get("values", ())]
    if kind == "kvlistValue" and isinstance(raw, Mapping):
        return {_key_of(kv): any_value(kv.get("value", {})) for kv in raw.get("values", ())}
    if kind == "bytesValue" and isinstance(raw, str):
        try:
            return base64.b64decode(raw, validate=True)
        except binascii.Error:
            raise ValueError("bytesValue is not base64") from None
    raise ValueError(f"not an OTLP AnyValue: {kind!r} holding a {type(raw).__name__}")


def _key_of(kv: Any) -> str:
    # OTLP/JSON leaves out a field at its default: an empty key is no key at all.
    key = kv.get("key", "") if isinstance(kv, Mapping) else None
    if not isinstance(key, str):
        raise ValueError("a key-value must be an object with a string key")
    return key


def _attributes(raw: Any, field: str) -> dict[str, Any]:
    """Attributes as ``{key: value}``: OTLP key-values (decoded), a map already, Arrow's map (key-value pairs), or
    JSON text of one of these (a Parquet or SQL export)."""
    if raw is None:
        return {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError as exc:
            raise _Bad(field, f"not valid JSON: {exc}") from None
    if isinstance(raw, Mapping):
        return dict(raw)
    if not isinstance(raw, Sequence) or isinstance(raw, bytes):
        raise _Bad(field, f"attributes must be a list of key-values or a map, not {type(raw).__name__}")
    out: dict[str, Any] = {}
    for i, kv in enumerate(raw):
        if type(kv) is dict:  # the common case first: a string attribute, as JSON parsing gives it
            value = kv.get("value")
            if type(value) is dict and len(value) == 1 and type(text := value.get("stringValue")) is str:
                key = kv.get("key")
                if type(key) is str:
                    out[key] = text
                    continue
        if isinstance(kv, Mapping) and isinstance(kv.get("key"), str):
            value = kv.get("value")
            try:
                out[kv["key"]] = any_value(value) if isinstance(value, Mapping) else value
            except ValueError as exc:
                raise _Bad(f"{field}[{kv['key']}]", str(exc)) from None
        elif isinstance(kv, Sequence) and not isinstance(kv, str | bytes) and len(kv) == 2:
            out[str(kv[0])] = kv[1]
        else:
            raise _Bad(f"{field}[{i}]", "an attribute must be {key, value}")
    return out


def _typed_attributes(raw: list[KeyValue] | None, field: str) -> dict[str, Any]:
    """:func:`_attributes` of key-values decoded as :class:`~delta_eval.ingest.otlp_json.KeyValue` structs (their
    keys known to be strings)."""
    out: dict[str, Any] = {}
    for kv in raw or ():
        value = kv.value
        if type(value) is dict and len(value) == 1 and type(text := value.get("stringValue")) is str:
            out[kv.key] = text
            continue
        try:
            out[kv.key] = any_value(value) if value is not None else None
        except ValueError as exc:
            raise _Bad(f"{field}[{kv.key}]", str(exc)) from None
    return out


def _nested(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """Attributes nested at their dots, so a dotted path (``gen_ai.request.model``) reads them; where a key is both a
    value and a prefix (``a`` and ``a.b``), the value stays under the full key too."""
    out: dict[str, Any] = {}
    for key, value in attributes.items():
        parts = key.split(".")
        cur = out
        for part in parts[:-1]:
            nxt = cur.get(part)
            if not isinstance(nxt, dict):
                if nxt is not None:
                    break
                nxt = cur[part] = {}
            cur = nxt
        else:
            cur.setdefault(parts[-1], value)
            continue
        out.setdefault(key, value)
    return out


@dataclass(slots=True)
class _Event:
    """A GenAI event: a span event or a log record, its body decoded (the attributes when it has none)."""

    name: str
    time: int
    body: Any
    attributes: dict[str, Any]


@dataclass(slots=True)
class _Span:
    trace_id: str
    span_id: str
    name: str
    start: int
    attributes: dict[str, Any]
    resource: dict[str, Any]
    events: list[_Event] = field(default_factory=list)


def _first(record: Mapping[str, Any], keys: Sequence[str]) -> Any:
    return next((record[k] for k in keys if record.get(k) is not None), None)


def _hex_id(raw: Any, field: str) -> str:
    """A trace or span id as lowercase hex (OTLP/JSON's form; bytes and protobuf JSON's base64 converted)."""
    if isinstance(raw, bytes):
        return raw.hex()
    if not isinstance(raw, str) or not raw:
        raise _Bad(field, "the span has no id")
    if len(raw) in (12, 24) and not all(c in "0123456789abcdefABCDEF" for c in raw):
        try:
            return base64.b64decode(raw, validate=True).hex()  # protobuf's JSON writes bytes as base64
        except binascii.Error:
            pass
    return raw.lower()


def _nanos(raw: Any, field: str) -> int:
    """A timestamp as nanoseconds since the epoch: OTLP's integer (as text or a number), or a datetime / ISO 8601
    text (a Parquet or SQL export; naive means UTC)."""
    if raw is None:
        return 0
    if isinstance(raw, int | float) and not isinstance(raw, bool):
        return int(raw)
    if isinstance(raw, str) and raw.isdigit():
        return int(raw)
    fraction = 0
    if isinstance(raw, datetime):
        when = raw
    else:
        # ISO text may carry nanoseconds (ClickHouse's DateTime64(9)), more than datetime keeps: read them apart.
        found = _ISO_FRACTION.match(str(raw))
        try:
            if found is None:
                raise ValueError
            when = datetime.fromisoformat(found[1] + found[3])
        except ValueError:
            raise _Bad(field, f"not a timestamp: {str(raw)[:40]!r}") from None
        fraction = int((found[2] or "").ljust(9, "0")[:9])
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    whole = int(when.replace(microsecond=0).timestamp()) * 1_000_000_000
    return whole + (fraction if not isinstance(raw, datetime) else when.microsecond * 1000)


def _body(raw: Any) -> Any:
    """An event's body as Python: an AnyValue decoded, JSON text parsed, else as it is."""
    if isinstance(raw, Mapping) and len(raw) == 1 and next(iter(raw)).endswith("Value"):
        raw = any_value(raw)
    if isinstance(raw, str) and raw[:1] in "[{":
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw


def _span_events(raw: Any, field: str) -> list[_Event]:
    if not raw:
        return []
    if isinstance(raw, str):
        raw = json.loads(raw)
    if not isinstance(raw, Sequence):
        raise _Bad(field, "events must be a list")
    out = []
    for i, e in enumerate(raw):
        if not isinstance(e, Mapping):
            raise _Bad(f"{field}[{i}]", "an event must be an object")
        name = str(e.get("name") or e.get("Name") or "")
        if name not in _MESSAGE_EVENTS and name != _DETAILS:
            continue
        attrs = _attributes(_first(e, ("attributes", "Attributes")), f"{field}[{i}].attributes")
        # A span event has no body: the body is JSON in gen_ai.event.content, or the attributes themselves.
        body = _body(attrs["gen_ai.event.content"]) if "gen_ai.event.content" in attrs else attrs
        time = _nanos(_first(e, ("timeUnixNano", "time_unix_nano", "Timestamp", "timestamp")), f"{field}[{i}].time")
        out.append(_Event(name, time, body, attrs))
    return out


def _clickhouse_events(row: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The ClickHouse exporter's nested ``Events`` columns as a list of events."""
    names = row.get("Events.Name") or []
    times = row.get("Events.Timestamp") or [None] * len(names)
    attrs = row.get("Events.Attributes") or [None] * len(names)
    return [{"name": n, "timeUnixNano": t, "attributes": a} for n, t, a in zip(names, times, attrs, strict=False)]


def _flat_span(row: Mapping[str, Any]) -> _Span:
    """A span kept one per row (Parquet, JSONL, SQL)."""
    attributes = _attributes(_first(row, _ATTRIBUTES), "attributes")
    for key, value in row.items():
        if key.startswith("attributes.") and value is not None:
            attributes.setdefault(key[len("attributes.") :], value)  # flattened columns
    resource = row.get("resource")
    resource_attrs = resource.get("attributes") if isinstance(resource, Mapping) else None
    resource_attrs = _first(row, _RESOURCE) if resource_attrs is None else resource_attrs
    events = row.get("events")
    if events is None and "Events.Name" in row:
        events = _clickhouse_events(row)
    return _Span(
        trace_id=_hex_id(_first(row, _TRACE_ID), "trace_id"),
        span_id=_hex_id(_first(row, _SPAN_ID), "span_id"),
        name=str(_first(row, _NAME) or ""),
        start=_nanos(_first(row, _START), "start_time"),
        attributes=attributes,
        resource=_attributes(resource_attrs, "resource.attributes"),
        events=_span_events(events, "events"),
    )


def _otlp_span(raw: Any, resource: dict[str, Any]) -> _Span:
    if not isinstance(raw, Mapping):
        raise _Bad("", f"a span must be an object, not {type(raw).__name__}")
    return _Span(
        trace_id=_hex_id(raw.get("traceId"), "traceId"),
        span_id=_hex_id(raw.get("spanId"), "spanId"),
        name=str(raw.get("name") or ""),
        start=_nanos(raw.get("startTimeUnixNano"), "startTimeUnixNano"),
        attributes=_attributes(raw.get("attributes"), "attributes"),
        resource=resource,
        events=_span_events(raw.get("events"), "events"),
    )


def _typed_span(raw: SpanStruct, resource: dict[str, Any]) -> _Span:
    """:func:`_otlp_span` of a span decoded as a :class:`~delta_eval.ingest.otlp_json.Span` struct."""
    return _Span(  # trace_id, span_id, name, start, attributes, resource, events (positional: faster to call)
        _hex_id(raw.traceId, "traceId"),
        _hex_id(raw.spanId, "spanId"),
        str(raw.name or ""),
        _nanos(raw.startTimeUnixNano, "startTimeUnixNano"),
        _typed_attributes(raw.attributes, "attributes"),
        resource,
        _span_events(raw.events, "events") if raw.events else [],
    )


def _conversation_key(span: _Span) -> str:
    return str(span.attributes.get(_CONVERSATION) or span.trace_id)


class _Fields(LazyMapping):
    """The values ``id`` and ``metadata`` paths read, nested on first use: only the first call of a conversation
    is read, so the others never pay for it."""

    __slots__ = ("_span",)

    def __init__(self, trace_id: str, span_id: str, name: str, attributes: dict[str, Any],
                 resource: dict[str, Any]) -> None:  # fmt: skip
        self._span = (trace_id, span_id, name, attributes, resource)
        self._built = None

    def __reduce__(self) -> tuple[Any, ...]:
        # A call past the memory bound is pickled (traces._Spill): the span's values, not the span.
        return _Fields, self._span

    def _build(self) -> dict[str, Any]:
        trace_id, span_id, name, attributes, resource = self._span
        built = _nested(attributes)
        built.update(trace_id=trace_id, span_id=span_id, span_name=name, resource=_nested(resource))
        return built


def _is_model_call(span: _Span) -> bool:
    op = span.attributes.get(_OPERATION)
    if op is not None:
        return op in MODEL_OPERATIONS
    # No operation name: an older or third-party instrumentation; a span holding prompts is a model call.
    attrs = span.attributes
    return (_INPUT in attrs or attrs.get("llm.request.type") in ("chat", "completion")
            or any(k.startswith(_PROMPT) for k in attrs))  # fmt: skip


# -- messages ------------------------------------------------------------------------------------------------------


_decode_json = msgspec.json.Decoder().decode


def _json(value: Any, field: str) -> Any:
    """An attribute that the spec writes as JSON text on a span, parsed (an export may hold it parsed already)."""
    if isinstance(value, str):
        try:
            return _decode_json(value)  # twice as fast as json.loads on the messages' text
        except (msgspec.DecodeError, RecursionError):
            pass
        try:  # what msgspec refuses, json may take (NaN, lone surrogates), else its error is the one reported
            return json.loads(value)
        except ValueError as exc:
            raise _Bad(field, f"not valid JSON: {exc}") from None
    return value


def _text(value: Any) -> str:
    """A tool result or content as text: text as is, a list of text blocks (Anthropic's tool result content) joined,
    anything else as JSON."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, list) and value and all(isinstance(b, Mapping) and b.get("type") == "text" for b in value):
        return "".join(str(b.get("text", b.get("content", ""))) for b in value)
    return json.dumps(value, ensure_ascii=False)


@dataclass(slots=True)
class _Sent:
    """What a call was sent: the JSON text, the messages read from it, how many messages the text holds, and the
    tool-call names known at its end; ``answer``, the JSON text the call's answer has when the next call re-sends
    it, with the message read from it (see :func:`_resent`)."""

    text: str
    messages: list[DraftMessage]
    count: int
    names: dict[str, str]
    answer: tuple[str, DraftMessage] | None = None


# The last member of an output message, which the next call's input leaves out when it re-sends the message.
_FINISH = re.compile(r',\s*"finish_reason"\s*:\s*"[^"\\]*"\s*\}\s*\]\s*$')


def _resent(output: str) -> str | None:
    """The JSON text of the one message of ``output`` (an output messages attribute) as the next call re-sends it:
    the same text, its ``finish_reason`` left out; ``None`` when it is not so simple to say.

    The text ends ``, "finish_reason": "stop"}]`` and is a valid array of one message (its messages were read):
    that closing brace is the message's own, and the member before it a key and a string of the message."""
    text = output.strip()
    if text[:1] != "[":
        return None
    found = _FINISH.search(text, max(0, len(text) - 200))
    body = text[1 : found.start()] + "}" if found is not None else text[1:].rstrip()[:-1]
    body = body.strip()
    return body if body[:1] == "{" and body[-1:] == "}" else None


class _Inputs:
    """What the last call of each recent conversation was sent, for the next call to build on; the least recently
    used are forgotten past ``size`` (a forgotten conversation's next call is read in full, as correctly)."""

    def __init__(self, size: int = 1024) -> None:
        self.size = size
        self._by_key: dict[str, _Sent] = {}
        self.texts: dict[tuple[str, str], Any] = {}  # tools and system prompts read, by their text

    def get(self, key: str) -> _Sent | None:
        return self._by_key.get(key)

    def put(self, key: str, sent: _Sent) -> None:
        self._by_key.pop(key, None)
        self._by_key[key] = sent
        if len(self._by_key) > self.size:
            del self._by_key[next(iter(self._by_key))]


class _Reader:
    """Reads the messages of one call, remembering each tool call's name so a result names its tool."""

    def __init__(self, span: _Span, err: Err) -> None:
        self.span, self.err = span, err
        self.names: dict[str, str] = {}
        self.made_ids = 0  # tool-call ids made up for calls recorded without one

    # -- parts-based messages (current conventions) --------------------------------------------------------------

    def parts_messages(self, raw: Any, field: str, offset: int = 0) -> list[DraftMessage]:
        raw = _json(raw, field)
        if raw is None:
            return []
        if type(raw) is not list and (not isinstance(raw, Sequence) or isinstance(raw, str)):
            raise _Bad(field, f"expected a list of messages, not {type(raw).__name__}")
        out: list[DraftMessage] = []
        for i, m in enumerate(raw, offset):
            if type(m) is not dict and not isinstance(m, Mapping):
                raise _Bad(f"{field}[{i}]", f"a message must be an object, not {type(m).__name__}")
            out.extend(self.parts_message(m, f"{field}[{i}]"))
        return out

    def input_messages(self, raw: Any, sent: _Sent | None) -> tuple[list[DraftMessage], _Sent | None]:
        """The messages a call was sent, and what to remember of them for the conversation's next call.

        An agent sends the whole history each time, so a call's input is usually the one before's with messages
        added at the end: when its JSON text starts with the text ``sent`` remembers (its closing bracket aside),
        only the rest is parsed, and the messages already read are shared, not read again. Reading a conversation
        then costs what its messages weigh, not the square of it."""
        if not isinstance(raw, str):
            return self.parts_messages(raw, _INPUT), None
        if sent is not None:
            n = len(sent.text) - 1
            if len(raw) > n and raw[n] == "," and raw.startswith(sent.text[:n]):
                self.names.update(sent.names)
                resent = self.resent_answer(raw[n + 1 :], sent)
                if resent is not None:
                    rest, answer = resent
                    count = sent.count + 1
                    messages = [*sent.messages, answer, *self.parts_messages(rest, _INPUT, count)]
                    return messages, _Sent(raw, messages, count + len(rest), dict(self.names))
                rest = _json("[" + raw[n + 1 :], _INPUT)
                if isinstance(rest, list):
                    messages = sent.messages + self.parts_messages(rest, _INPUT, sent.count)
                    return messages, _Sent(raw, messages, sent.count + len(rest), dict(self.names))
        parsed = _json(raw, _INPUT)
        messages = self.parts_messages(parsed, _INPUT)
        count = len(parsed) if isinstance(parsed, list) else 0
        return messages, _Sent(raw, messages, count, dict(self.names))

    def resent_answer(self, tail: str, sent: _Sent) -> tuple[list[Any], DraftMessage] | None:
        """When ``tail`` (the input's text after the messages ``sent`` holds) starts with the previous call's answer
        as it was recorded, the messages after it (parsed) and the answer as read then: the answer is not read
        twice. ``None`` when it does not, or when what follows is not valid JSON (read in full, its error is then
        the same as ever)."""
        if sent.answer is None:
            return None
        text, answer = sent.answer
        body = tail.lstrip()
        if not body.startswith(text):
            return None
        after = body[len(text) :].lstrip()
        if after[:1] == ",":
            after = after[1:]
            if after.lstrip()[:1] == "]":
                return None  # a trailing comma: not JSON, as a full read says
        elif after[:1] != "]":
            return None
        try:
            rest = _decode_json("[" + after)  # the messages after the answer, or none: "[]"
        except (msgspec.DecodeError, RecursionError):
            return None
        if not isinstance(rest, list):
            return None
        for call_id, name, _ in answer[2]:  # as reading it again would name its calls
            self.names[call_id] = name
        return rest, answer

    def parts_message(self, m: Mapping[str, Any], field: str) -> list[DraftMessage]:
        role = m.get("role") or "assistant"  # an output message may leave its role out
        parts = m.get("parts")
        if parts is None and "content" in m:  # a message some instrumentations write chat-style
            parts = [{"type": "text", "content": m["content"]}] if isinstance(m["content"], str) else m["content"]
        if type(parts) is not list and (not isinstance(parts, Sequence) or isinstance(parts, str)):
            raise _Bad(f"{field}.parts", "a message needs a list of parts")
        if len(parts) == 1 and (role == "user" or role == "assistant"):  # most messages: what the loop makes of them
            p = parts[0]
            if type(p) is dict and p.get("type") == "text" and type(text := p.get("content", p.get("text"))) is str:
                return [("user" if role == "user" else "assistant", text, (), None, None, None)]
        texts: list[str] = []
        calls: list[DraftToolCall] = []
        results: list[DraftMessage] = []
        thoughts: list[str] = []
        for j, p in enumerate(parts):
            kind = p.get("type") if type(p) is dict or isinstance(p, Mapping) else None
            if type(kind) is not str:
                raise _Bad(f"{field}.parts[{j}]", "a part must be an object with a type")
            if kind == "text":
                text = p.get("content", p.get("text"))
                if type(text) is not str:
                    raise _Bad(f"{field}.parts[{j}].content", "a text part needs its content")
                texts.append(text)
            elif kind == "tool_call" and role == "assistant":
                calls.append(self.tool_call(p.get("id"), p.get("name"), p.get("arguments"), f"{field}.parts[{j}]"))
            elif kind == "tool_call_response" and role in ("tool", "user"):
                call_id = p.get("id")
                if type(call_id) is not str or not call_id:
                    raise _Bad(f"{field}.parts[{j}].id", "a tool call response needs the id of the call it answers")
                content = _text(p.get("response"))
                results.append(draft("tool", content=content, tool_call_id=call_id,
                                       name=self.names.get(call_id)))  # fmt: skip
            elif kind == "reasoning" and role == "assistant":
                if isinstance(p.get("content"), str):
                    thoughts.append(p["content"])
            elif kind in _MEDIA_PARTS:
                texts.append(placeholder(str(p.get("modality") or kind), p.get("mime_type")))
            else:
                raise _Bad(f"{field}.parts[{j}].type", f"unsupported part {kind!r} in a {role} message")
        return self.message(role, texts, calls, results, thoughts, field)

    def message(self, role: Any, texts: list[str], calls: list[DraftToolCall], results: list[DraftMessage],
                thoughts: list[str], field: str) -> list[DraftMessage]:  # fmt: skip
        content = "".join(texts) if texts else None
        if role in ("system", "developer"):
            return [draft("system", content=content or "")]
        if role == "assistant":
            if content is None and not calls:
                raise _Bad(field, "an assistant message needs text or tool calls")
            state = None
            if thoughts:
                state = ReasoningState(provider=PROVIDER, model=self.model, summary="\n".join(thoughts))
            return [draft("assistant", content=content, tool_calls=tuple(calls), reasoning=state)]
        if role == "tool" or results:
            if not results:
                raise _Bad(field, "a tool message needs a tool_call_response part")
            # Text beside results is the user's, after them (results come first in a turn).
            return results + ([draft("user", content=content)] if content is not None else [])
        if role == "user":
            return [draft("user", content=content or "")]
        raise _Bad(f"{field}.role", f"unknown role {role!r}")

    @property
    def model(self) -> str:
        attrs = self.span.attributes
        return str(attrs.get("gen_ai.response.model") or attrs.get("gen_ai.request.model") or "")

    def once(self, name: str, raw: Any, read: Callable[[Any], Any], inputs: _Inputs | None) -> Any:
        """``read(raw)``, remembered by its text: a skill sends the same tools and system prompt on each call, and
        its calls then share one parsed copy."""
        if raw is None:
            return None
        if inputs is None or not isinstance(raw, str):
            return read(raw)
        key = (name, raw)
        if key not in inputs.texts:
            inputs.texts[key] = read(raw)
            if len(inputs.texts) > inputs.size:
                del inputs.texts[next(iter(inputs.texts))]
        return inputs.texts[key]

    def tool_call(self, call_id: Any, name: Any, arguments: Any, field: str) -> DraftToolCall:
        if not isinstance(name, str) or not name:
            raise _Bad(f"{field}.name", "a tool call needs the tool's name")
        if not isinstance(call_id, str) or not call_id:
            call_id = f"{self.span.span_id}-{len(self.names)}"
            self.made_ids += 1
        try:
            args = arguments_json(arguments, self.err, f"{field}.arguments")
        except RecordError as exc:
            raise _Bad(exc.field, exc.reason) from None
        self.names[call_id] = name
        return (call_id, name, args)

    def system_instructions(self, raw: Any) -> str | None:
        raw = _json(raw, _SYSTEM) if isinstance(raw, str) and raw[:1] in "[{" else raw
        if raw is None or isinstance(raw, str):
            return raw
        if isinstance(raw, Mapping):
            raw = [raw]
        texts = []
        for j, p in enumerate(raw if isinstance(raw, Sequence) else ()):
            text = p.get("content", p.get("text")) if isinstance(p, Mapping) else p
            if not isinstance(text, str):
                raise _Bad(f"{_SYSTEM}[{j}]", "a system instruction must be a text part")
            texts.append(text)
        return "\n\n".join(texts)

    def tools(self, raw: Any) -> tuple[ToolSpec, ...]:
        raw = _json(raw, _TOOLS)
        if isinstance(raw, list):  # Anthropic's tools (OpenLLMetry writes them as sent) name the schema input_schema
            raw = [{**t, "parameters": t["input_schema"]} if isinstance(t, Mapping) and "input_schema" in t
                   and "parameters" not in t else t for t in raw]  # fmt: skip
        try:
            return parse_tools(raw, field=_TOOLS)
        except RecordError as exc:
            raise _Bad(exc.field, exc.reason) from None

    # -- the older event form --------------------------------------------------------------------------------------

    def event_message(self, ev: _Event, field: str) -> list[DraftMessage]:
        role = _MESSAGE_EVENTS[ev.name]
        body = ev.body if isinstance(ev.body, Mapping) else {"content": ev.body}
        if role == "choice":
            message = body.get("message")
            body = message if isinstance(message, Mapping) else body
            role = "assistant"
        content = body.get("content")
        if isinstance(content, Sequence) and not isinstance(content, str):  # chat parts: [{"type": "text", ...}]
            content = "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
        if content is not None and not isinstance(content, str):
            content = _text(content)
        if role == "assistant":
            calls = []
            for j, c in enumerate(body.get("tool_calls") or ()):
                fn = c.get("function") if isinstance(c, Mapping) else None
                if not isinstance(fn, Mapping):
                    raise _Bad(f"{field}.tool_calls[{j}].function", "a tool call needs its function")
                calls.append(self.tool_call(c.get("id"), fn.get("name"), fn.get("arguments"),
                                            f"{field}.tool_calls[{j}].function"))  # fmt: skip
            if content is None and not calls:
                raise _Bad(f"{field}.content", "no content recorded (is content capture on?)")
            return [draft("assistant", content=content, tool_calls=tuple(calls))]
        if content is None:
            raise _Bad(f"{field}.content", "no content recorded (is content capture on?)")
        if role == "tool":
            call_id = body.get("id") or body.get("tool_call_id")
            if not isinstance(call_id, str) or not call_id:
                raise _Bad(f"{field}.id", "a tool message needs the id of the call it answers")
            return [draft("tool", content=content, tool_call_id=call_id, name=self.names.get(call_id))]
        return [draft("system" if role == "system" else "user", content=content)]

    def from_events(self, events: list[_Event], where: str) -> RecordedCall:
        sent: list[DraftMessage] = []
        answers: list[DraftMessage] = []
        for k, ev in enumerate(events):
            if ev.name == "gen_ai.choice":
                index = ev.body.get("index", 0) if isinstance(ev.body, Mapping) else 0
                if index in (0, None) and not answers:  # the first choice is the answer the agent went on with
                    answers.extend(self.event_message(ev, f"{where}[{k}] ({ev.name})"))
            else:
                sent.extend(self.event_message(ev, f"{where}[{k}] ({ev.name})"))
        if not sent:
            raise _Bad(where, "the call's events record no input message")
        return RecordedCall(input=tuple(sent), output=tuple(answers))

    # -- indexed attributes (OpenLLMetry) -------------------------------------------------------------------------

    def from_indexed(self) -> RecordedCall:
        prompts = _indexed(self.span.attributes, _PROMPT)
        completions = _indexed(self.span.attributes, _COMPLETION)
        sent = [m for i, p in sorted(prompts.items()) for m in self.indexed_message(p, f"{_PROMPT}{i}")]
        answers = [m for i, c in sorted(completions.items())[:1] for m in self.indexed_message(c, f"{_COMPLETION}{i}")]
        functions = _indexed(self.span.attributes, _FUNCTIONS)
        tools = None
        if functions:
            specs = [{"name": f.get("name"), "description": f.get("description"),
                      "parameters": f.get("parameters")} for _, f in sorted(functions.items())]  # fmt: skip
            try:
                tools = parse_tools(specs, field=_FUNCTIONS.rstrip("."))
            except RecordError as exc:
                raise _Bad(exc.field, exc.reason) from None
        return RecordedCall(input=tuple(sent), output=tuple(answers), tools=tools)

    def indexed_message(self, m: Mapping[str, Any], field: str) -> list[DraftMessage]:
        role = m.get("role") or "assistant"
        content = m.get("content")
        blocks = _json(content, f"{field}.content") if isinstance(content, str) and content[:1] == "[" else None
        if isinstance(blocks, list) and all(isinstance(b, Mapping) and "type" in b for b in blocks):
            return self.block_message(role, blocks, m, field)  # Anthropic's content blocks, kept as JSON text
        calls = [self.tool_call(c.get("id"), c.get("name"), c.get("arguments"), f"{field}.tool_calls.{j}")
                 for j, c in sorted(_numbered(m.get("tool_calls")).items())]  # fmt: skip
        text = content if isinstance(content, str) else (None if content is None else _text(content))
        if role == "tool":
            call_id = m.get("tool_call_id")
            if not isinstance(call_id, str) or not call_id:
                raise _Bad(f"{field}.tool_call_id", "a tool message needs the id of the call it answers")
            return [draft("tool", content=text or "", tool_call_id=call_id, name=self.names.get(call_id))]
        return self.message(role, [text] if text is not None else [], calls, [], [], field)

    def block_message(self, role: Any, blocks: list[Any], m: Mapping[str, Any], field: str) -> list[DraftMessage]:
        texts: list[str] = []
        calls: list[DraftToolCall] = []
        results: list[DraftMessage] = []
        thoughts: list[str] = []
        for j, b in enumerate(blocks):
            kind, where = b["type"], f"{field}.content[{j}]"
            if kind == "text":
                texts.append(str(b.get("text", "")))
            elif kind == "tool_use":
                calls.append(self.tool_call(b.get("id"), b.get("name"), b.get("input"), where))
            elif kind == "tool_result":
                call_id = b.get("tool_use_id")
                if not isinstance(call_id, str) or not call_id:
                    raise _Bad(f"{where}.tool_use_id", "a tool result needs the tool_use_id it answers")
                inner = b.get("content")
                if isinstance(inner, list):
                    inner = "".join(str(x.get("text", "")) for x in inner if isinstance(x, Mapping))
                results.append(draft("tool", content=_text(inner if inner is not None else ""),
                                       tool_call_id=call_id, name=self.names.get(call_id)))  # fmt: skip
            elif kind == "thinking":
                thoughts.append(str(b.get("thinking", "")))
            elif kind in ("image", "document"):
                source = b.get("source")
                texts.append(placeholder(kind, source.get("media_type") if isinstance(source, Mapping) else None))
            elif kind != "redacted_thinking":
                raise _Bad(f"{where}.type", f"unsupported block {kind!r}")
        return self.message(role, texts, calls, results, thoughts, field)

    # -- a span's call -------------------------------------------------------------------------------------------

    def call(self, attrs: Mapping[str, Any], inputs: _Inputs | None = None, key: str = "") -> RecordedCall | None:
        """The call the span records, or ``None`` when it records no messages of its own (they may be in log
        records of the older event form). ``inputs`` remembers what each conversation's last call was sent."""
        if _INPUT in attrs or _OUTPUT in attrs:
            sent, remembered = self.input_messages(attrs.get(_INPUT), inputs.get(key) if inputs is not None else None)
            if inputs is not None and remembered is not None:
                inputs.put(key, remembered)
            output, made = attrs.get(_OUTPUT), self.made_ids
            drafted = self.parts_messages(output, _OUTPUT)
            answer = next((m for m in drafted if m[0] == "assistant"), None)
            # The next call re-sends this answer: it can take it as read here unless reading it depends on this span
            # (a call id made from the span's id, reasoning naming the span's model).
            if (remembered is not None and answer is not None and len(drafted) == 1 and answer[5] is None
                    and self.made_ids == made and isinstance(output, str)):  # fmt: skip
                text = _resent(output)
                remembered.answer = (text, answer) if text is not None else None
            tools = self.once(_TOOLS, attrs.get(_TOOLS), self.tools, inputs)
            system = self.once(_SYSTEM, attrs.get(_SYSTEM), self.system_instructions, inputs)
            # input, output, system, tools (positional: faster to call)
            return RecordedCall(tuple(sent), (answer,) if answer is not None else (), system, tools)
        details = [e for e in self.span.events if e.name == _DETAILS]
        if details:
            return self.call(details[0].attributes)
        events = [e for e in self.span.events if e.name in _MESSAGE_EVENTS]
        if events:
            return self.from_events(events, "events")
        if any(k.startswith(_PROMPT) or k.startswith(_COMPLETION) for k in attrs):
            return self.from_indexed()
        return None


def _numbered(raw: Any) -> dict[int, Any]:
    if isinstance(raw, Mapping):
        return {int(k): v for k, v in raw.items() if str(k).isdigit()}
    if isinstance(raw, Sequence) and not isinstance(raw, str):
        return dict(enumerate(raw))
    return {}


def _indexed(attrs: Mapping[str, Any], prefix: str) -> dict[int, dict[str, Any]]:
    """``prefix.N.a.b`` attributes as ``{N: {"a": {"b": value}}}`` (numbered levels stay keyed by their number)."""
    out: dict[int, dict[str, Any]] = {}
    for key, value in attrs.items():
        if not key.startswith(prefix):
            continue
        index, _, rest = key[len(prefix) :].partition(".")
        if not index.isdigit() or not rest:
            continue
        cur = out.setdefault(int(index), {})
        *path, last = rest.split(".")
        for part in path:
            cur = cur.setdefault(part, {})
            if not isinstance(cur, dict):
                break
        else:
            cur[last] = value
    return out


# -- records to calls ----------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Pending:
    """The older event form's log records of one span, waiting for the end of the source (the span may come
    before or after them, or not at all)."""

    events: list[_Event] = field(default_factory=list)
    label: str = ""
    trace_id: str = ""


class _Calls:
    """The state of one reading: a counter keeping equal start times in source order, and the older event form's
    spans and log records, joined by span id once the source has been read."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.seq = 0
        self.done: set[int | str] = set()  # spans whose call was read from the span itself (see _done_key)
        self.waiting: dict[str, tuple[_Span, str]] = {}  # model spans with no messages of their own
        self.logs: dict[str, _Pending] = {}
        self.inputs = _Inputs()

    def traced(self, span: _Span, call: RecordedCall, label: str, key: str | None = None) -> TracedCall:
        self.seq += 1
        # The messages are read: their text need not stay in memory until the conversation is assembled.
        attributes = span.attributes
        for name in _MESSAGE_ATTRIBUTES:
            if name in attributes:
                del attributes[name]
        span.events = []
        fields = _Fields(span.trace_id, span.span_id, span.name, attributes, span.resource)
        key = _conversation_key(span) if key is None else key
        return TracedCall(key, (span.start, self.seq), label, call, fields)

    def span(self, make: Callable[[], _Span], label: str) -> TracedCall | RecordError | None:
        """The call of one span (``make()`` builds it), an error naming its field, or ``None`` for another span
        (or one whose call waits for its log records)."""
        try:
            span = make()
            if not _is_model_call(span):
                return None
            label = f"{label} (span id {span.span_id})"
            key = _conversation_key(span)
            call = _Reader(span, Err(self.source, label, "")).call(span.attributes, self.inputs, key)
        except _Bad as exc:
            return RecordError(self.source, label, exc.field, exc.reason)
        except (RecordError, ValueError) as exc:  # a message the schema refuses (pydantic's error is a ValueError)
            return exc if isinstance(exc, RecordError) else RecordError(self.source, label, "", str(exc))
        if call is None:
            self.waiting[span.span_id] = (span, label)
            return None
        self.done.add(_done_key(span.span_id))
        return self.traced(span, call, label, key)

    def log(self, raw: Any, label: str) -> RecordError | None:
        """Keep a log record of the older event form (or the details event) until the source has been read."""
        try:
            if not isinstance(raw, Mapping):
                raise _Bad("", "a log record must be an object")
            attrs = _attributes(raw.get("attributes"), "attributes")
            name = raw.get("eventName") or attrs.get("event.name")
            if name not in _MESSAGE_EVENTS and name != _DETAILS:
                return None
            span_id = _hex_id(raw.get("spanId"), "spanId")
            body = _body(raw.get("body")) if raw.get("body") is not None else attrs
            time = _nanos(raw.get("timeUnixNano") or raw.get("observedTimeUnixNano"), "timeUnixNano")
        except (_Bad, ValueError) as exc:
            field_, reason = (exc.field, exc.reason) if isinstance(exc, _Bad) else ("body", str(exc))
            return RecordError(self.source, label, field_, reason)
        pending = self.logs.setdefault(span_id, _Pending(label=label))
        pending.trace_id = pending.trace_id or str(raw.get("traceId") or "")
        pending.events.append(_Event(str(name), time, body, attrs))
        return None

    def leftovers(self) -> Iterator[TracedCall | RecordError]:
        """The calls of the older event form, their log records joined to their spans; a model span with no
        messages anywhere is an error saying so."""
        for span_id, pending in self.logs.items():
            if _done_key(span_id) in self.done:
                continue  # the span had the messages itself (recorded both ways)
            span, label = self.waiting.pop(span_id, (None, None))
            if span is None:  # only the log records: the call is what they say
                span = _Span(pending.trace_id, span_id, "", min(e.time for e in pending.events), {}, {})
                label = f"{pending.label} (log records of span id {span_id})"
            assert label is not None
            span.events = sorted(pending.events, key=lambda e: e.time)
            reader = _Reader(span, Err(self.source, label, ""))
            try:
                call = reader.call({})
            except _Bad as exc:
                yield RecordError(self.source, label, exc.field, exc.reason)
                continue
            except (RecordError, ValueError) as exc:
                yield exc if isinstance(exc, RecordError) else RecordError(self.source, label, "", str(exc))
                continue
            if call is not None:
                yield self.traced(span, call, label)
        for _span, label in self.waiting.values():
            yield RecordError(self.source, label, _INPUT, "the model-call span records no messages (no "
                              f"{_INPUT} attribute or message events; is content capture on?)")  # fmt: skip


def _done_key(span_id: str) -> int | str:
    # Every span read is remembered until the end (its log records may come after it): a 64-bit id as the number
    # it is takes half the memory of its hex text.
    return int(span_id, 16) if _SPAN_HEX.fullmatch(span_id) else span_id


_SPAN_HEX = re.compile(r"[0-9a-f]{16}")


def calls(records: Iterable[tuple[str, Any]], source: str) -> Iterator[TracedCall | RecordError]:
    """The model calls in raw records: OTLP/JSON export requests (flattened into their spans and log records) or
    one span per record; an error naming the span and the field for a span that cannot be read."""
    state = _Calls(source)
    for label, record in records:
        if isinstance(record, RecordError):
            yield record
            continue
        if not isinstance(record, Mapping):
            yield RecordError(source, label, "", f"expected a span or an OTLP export, not {type(record).__name__}")
            continue
        # An export line decoded into structs is an export (asking it for a key would parse its JSON again).
        if type(record) is ExportRecord or "resourceSpans" in record or "resourceLogs" in record:
            yield from _otlp_calls(state, record, label)
        else:
            if (item := state.span(partial(_flat_span, record), label)) is not None:
                yield item
    yield from state.leftovers()


def _otlp_calls(state: _Calls, doc: Mapping[str, Any], label: str) -> Iterator[TracedCall | RecordError]:
    try:
        yield from _otlp_items(state, doc, label)
    except (AttributeError, TypeError):  # a list where an object belongs, or the reverse
        yield RecordError(state.source, label, "", "not an OTLP export: expected resourceSpans[].scopeSpans[]"
                          ".spans[] (or resourceLogs[].scopeLogs[].logRecords[]) of objects")  # fmt: skip


def _otlp_items(state: _Calls, doc: Mapping[str, Any], label: str) -> Iterator[TracedCall | RecordError]:
    if type(doc) is ExportRecord:
        yield from _typed_spans(state, doc.export.resourceSpans or (), label)
        logs = doc.export.resourceLogs
        yield from _log_records(state, None if logs is msgspec.UNSET else logs, label)
        return
    n = 0
    for i, rs in enumerate(doc.get("resourceSpans") or ()):
        try:
            resource = _attributes((rs.get("resource") or {}).get("attributes"), f"resourceSpans[{i}].resource")
        except _Bad as exc:
            yield RecordError(state.source, label, exc.field, exc.reason)
            continue
        for ss in rs.get("scopeSpans") or ():
            for raw in ss.get("spans") or ():
                if (item := state.span(partial(_otlp_span, raw, resource), f"{label}, span {n}")) is not None:
                    yield item
                n += 1
    yield from _log_records(state, doc.get("resourceLogs"), label)


def _typed_spans(
    state: _Calls, resource_spans: Iterable[ResourceSpans], label: str
) -> Iterator[TracedCall | RecordError]:
    """:func:`_otlp_items`' spans of an export decoded into structs."""
    n = 0
    for i, rs in enumerate(resource_spans):
        try:
            attributes = rs.resource.attributes if rs.resource is not None else None
            resource = _typed_attributes(attributes, f"resourceSpans[{i}].resource")
        except _Bad as exc:
            yield RecordError(state.source, label, exc.field, exc.reason)
            continue
        for ss in rs.scopeSpans or ():
            for raw in ss.spans or ():
                if _other_operation(raw):
                    pass
                elif (item := state.span(partial(_typed_span, raw, resource), f"{label}, span {n}")) is not None:
                    yield item
                n += 1


def _other_operation(raw: SpanStruct) -> bool:
    """Whether a span names an operation that is not a model call (a tool's, an agent's): nothing of it is read, so
    it is not built (an agent's trace holds about as many such spans as model calls)."""
    for kv in raw.attributes or ():
        if kv.key == _OPERATION:
            value = kv.value
            op = value.get("stringValue") if type(value) is dict else None
            return type(op) is str and op not in MODEL_OPERATIONS
    return False


def _log_records(state: _Calls, resource_logs: Any, label: str) -> Iterator[RecordError]:
    n = 0
    for rl in resource_logs or ():
        for sl in rl.get("scopeLogs") or ():
            for raw in sl.get("logRecords") or ():
                error = state.log(raw, f"{label}, log record {n}")
                n += 1
                if error is not None:
                    yield error


def looks_like(record: Any) -> bool:
    """Whether a record is an OTLP export or a span with GenAI attributes (``message_format="auto"``); an OTLP
    export of OpenInference spans (``openinference.span.kind``) is not."""
    if not isinstance(record, Mapping):
        return False
    if "resourceLogs" in record:
        return True
    if "resourceSpans" in record:
        spans = (s for rs in record["resourceSpans"] or () for ss in rs.get("scopeSpans") or ()
                 for s in ss.get("spans") or ())  # fmt: skip
        keys = {kv.get("key") for s in spans for kv in s.get("attributes") or () if isinstance(kv, Mapping)}
        return any(str(k).startswith("gen_ai.") for k in keys) or "openinference.span.kind" not in keys
    if _first(record, _SPAN_ID) is None:
        return False
    try:
        attrs = _attributes(_first(record, _ATTRIBUTES), "attributes")
    except _Bad:
        return False
    return any(k.startswith("gen_ai.") for k in attrs) or any(k.startswith("attributes.gen_ai.") for k in record)


#: The OpenTelemetry GenAI trace format (``message_format="otel"``).
FORMAT = TraceFormat(calls=calls, looks_like=looks_like, decode_line=decode_line)
