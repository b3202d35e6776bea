"""Read Langfuse observations as model calls.

An observation of ``type`` ``GENERATION`` is one model call: ``input`` what was sent (a list of chat messages, or
``{"messages": [...], "tools": [...]}`` as Langfuse's OpenAI integration records a call with tools; OpenAI's or
Anthropic's spelling), ``output`` the answer (a chat message, an OpenAI completion, an Anthropic message or text),
``model``, ``modelParameters`` and ``metadata``. Spans, events, agents, tools and the other types are passed over.

Records are read in the shapes Langfuse gives them:

- an observation as the public API returns it (``GET /api/public/observations`` items: ``id``, ``traceId``,
  ``type``, ``startTime``, ``input``, ``output``, ``model``, ``modelParameters``, ``metadata``), one per line, or
  a whole page of them (``{"data": [...], "meta": ...}``), as the UI's export writes them;
- a trace (``GET /api/public/traces/{id}``: ``id``, ``sessionId`` and its ``observations``);
- a span as the Langfuse SDK (v3 and later, built on OpenTelemetry) sends it, before the server makes it an
  observation: ``langfuse.observation.type``/``input``/``output``/``model.name``/``model.parameters``,
  ``langfuse.observation.metadata.*`` and the trace's ``session.id`` attributes.

The exports need a Langfuse server, which the tests do not run: they read the spans the real SDK (its OpenAI
integration) records, and the API shapes built from those spans as the public API's specification
(``fern/apis/server/definition/observations.yml``, ``traces.yml`` of github.com/langfuse/langfuse) describes them.

Calls are grouped by the trace's ``sessionId``, else by ``traceId``, and ordered by ``startTime``. ``input`` and
``output`` may be JSON text (a Parquet or CSV export keeps them so).

Example:
    >>> generation = {"id": "o1", "type": "GENERATION", "traceId": "t1", "startTime": "2026-01-01T00:00:00Z",
    ...               "input": [{"role": "user", "content": "hi"}],
    ...               "output": {"role": "assistant", "content": "hello"}}
    >>> [c] = FORMAT.calls([("line 1", generation)], "observations.jsonl")
    >>> c.conversation, c.label, [m.content for m in c.call.input + c.call.output]
    ('t1', 'line 1, observation o1', ['hi', 'hello'])
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from delta_eval.exceptions import RecordError
from delta_eval.ingest.model_calls import RecordedCall
from delta_eval.ingest.native_base import Err
from delta_eval.ingest.trace_fields import answer_messages, as_json, chat_messages, instant, is_list, tool_specs
from delta_eval.ingest.traces import TracedCall, TraceFormat
from delta_eval.schema import Message, ToolSpec

__all__ = ["FORMAT", "looks_like", "model_calls", "observation_of_span"]

_PREFIX = "langfuse.observation."


def _first(record: Mapping[str, Any], *keys: str) -> Any:
    """The first of ``keys`` the record has a value for (the API's camelCase, a flat export's snake_case)."""
    return next((record[k] for k in keys if record.get(k) is not None), None)


def _is_observation(record: Any) -> bool:
    return (
        isinstance(record, Mapping)
        and "run_type" not in record
        and isinstance(record.get("type"), str)
        and _first(record, "traceId", "trace_id") is not None
        and _first(record, "startTime", "start_time") is not None
    )


def _is_sdk_span(record: Any) -> bool:
    attributes = record.get("attributes") if isinstance(record, Mapping) else None
    return isinstance(attributes, Mapping) and f"{_PREFIX}type" in attributes


def looks_like(record: Any) -> bool:
    """Whether ``record`` is Langfuse's: an observation (``type``, ``traceId``, ``startTime``), a trace with its
    ``observations``, a page of either (``data``), or a span of the Langfuse SDK (``langfuse.observation.type``)."""
    if not isinstance(record, Mapping):
        return False
    return _holds(record) or (is_list(record.get("data")) and bool(record["data"]) and _holds(record["data"][0]))


def _holds(record: Any) -> bool:
    """Whether ``record`` is an observation, a span of the SDK, or a trace with its observations."""
    if _is_observation(record) or _is_sdk_span(record):
        return True
    items = record.get("observations") if isinstance(record, Mapping) else None
    return is_list(items) and bool(items) and _is_observation(items[0])


def observation_of_span(span: Mapping[str, Any]) -> dict[str, Any]:
    """A span the Langfuse SDK exports (``ReadableSpan.to_json()``) as the observation the server makes of it: the
    ``langfuse.observation.*`` attributes as its fields, the trace's ``session.id`` as ``sessionId``."""
    attributes = span["attributes"]
    context: Mapping[str, Any] = span["context"] if isinstance(span.get("context"), Mapping) else {}
    metadata_prefix = f"{_PREFIX}metadata."
    metadata = {k[len(metadata_prefix) :]: as_json(v) for k, v in attributes.items() if k.startswith(metadata_prefix)}
    whole = as_json(attributes.get(f"{_PREFIX}metadata"))
    if isinstance(whole, Mapping):
        metadata |= whole
    return {
        "id": str(context.get("span_id") or "").removeprefix("0x") or None,
        "traceId": str(context.get("trace_id") or "").removeprefix("0x") or None,
        "type": str(attributes[f"{_PREFIX}type"]).upper(),
        "name": span.get("name"),
        "startTime": span.get("start_time"),
        "endTime": span.get("end_time"),
        "model": attributes.get(f"{_PREFIX}model.name"),
        "modelParameters": as_json(attributes.get(f"{_PREFIX}model.parameters")),
        "input": as_json(attributes.get(f"{_PREFIX}input")),
        "output": as_json(attributes.get(f"{_PREFIX}output")),
        "metadata": metadata,
        "sessionId": attributes.get("session.id") or attributes.get("langfuse.session.id"),
        "userId": attributes.get("user.id"),
    }


def _observations(record: Any, nested: bool = False) -> Iterator[tuple[str, Any, Any]]:
    """``(where, observation, session id)`` for each observation a record holds (itself, a trace's, a page's: a
    page holds observations or traces, not pages)."""
    if _is_sdk_span(record):
        yield "", observation_of_span(record), None
    elif _is_observation(record):
        yield "", record, None
    elif isinstance(record, Mapping) and is_list(record.get("observations")):
        session = _first(record, "sessionId", "session_id")
        for k, item in enumerate(record["observations"]):
            yield f", observations[{k}]", item, session
    elif isinstance(record, Mapping) and is_list(record.get("data")) and not nested:
        for k, item in enumerate(record["data"]):
            for where, observation, session in _observations(item, nested=True):
                yield f", data[{k}]{where}", observation, session
    elif not (isinstance(record, Mapping) and isinstance(record.get("attributes"), Mapping)):
        yield "", record, None
    # else: a span of another instrumentation beside the Langfuse SDK's own: not an observation, passed over


def _messages(raw: Any, err: Err) -> tuple[tuple[Message, ...], Any]:
    """The messages a generation's ``input`` holds, and the tools beside them."""
    if isinstance(raw, str):
        return (Message(role="user", content=raw),), None
    if is_list(raw):
        return chat_messages(raw, err, "input"), None
    if isinstance(raw, Mapping) and "messages" in raw:
        return chat_messages(as_json(raw["messages"]), err, "input.messages", system=raw.get("system")), raw.get(
            "tools"
        )
    what = type(raw).__name__ if not isinstance(raw, Mapping) else f"an object with {sorted(raw)}"
    raise err("input", f"expected the messages sent (a list, or an object with messages), got {what}")


def _tools(listed: Any, observation: Mapping[str, Any], err: Err) -> tuple[ToolSpec, ...] | None:
    if listed is not None:
        return tool_specs(as_json(listed), err, "input.tools")
    params = as_json(_first(observation, "modelParameters", "model_parameters"))
    if isinstance(params, Mapping) and params.get("tools") is not None:
        return tool_specs(as_json(params["tools"]), err, "modelParameters.tools")
    return None


def _traced(observation: Any, session: Any, where: str, source: str, position: int) -> TracedCall | None:
    if not isinstance(observation, Mapping):
        raise RecordError(source, where, "", f"an observation must be an object, not {type(observation).__name__}")
    if "type" not in observation:
        raise RecordError(source, where, "type", f"not a Langfuse observation: it has no type (found "
                          f"{sorted(map(str, observation))[:8]})")  # fmt: skip
    if str(observation.get("type")).upper() != "GENERATION":
        return None  # spans, events, agents, tools: not a model call
    if observation.get("id") is not None:
        where = f"{where}, observation {observation['id']}"
    err = Err(source, where, "")
    fields = {k: as_json(v) for k, v in observation.items()}
    sent, listed_tools = _messages(fields.get("input"), err)
    call = RecordedCall(input=sent, output=answer_messages(fields.get("output"), err, "output"),
                        tools=_tools(listed_tools, fields, err))  # fmt: skip
    session = session or _first(fields, "sessionId", "session_id")
    if session is not None:
        fields["sessionId"] = session
    key = session or _first(fields, "traceId", "trace_id") or where
    start = instant(_first(fields, "startTime", "start_time"))
    order = (start if start is not None else float("inf"), position)
    return TracedCall(conversation=str(key), order=order, label=where, call=call, fields=fields)


def model_calls(records: Iterable[tuple[str, Any]], source: str) -> Iterator[TracedCall | RecordError]:
    """The model calls of Langfuse records ``(label, record)``: one per generation, a :class:`RecordError` for one
    that cannot be read (naming the line, the observation id and the field)."""
    position = 0
    for label, record in records:
        if isinstance(record, RecordError):
            yield record
            continue
        if not isinstance(record, Mapping):
            yield RecordError(source, label, "", f"a Langfuse record must be an object, not {type(record).__name__}")
            continue
        for where, observation, session in _observations(record):
            position += 1
            try:
                traced = _traced(observation, session, label + where, source, position)
            except RecordError as exc:
                yield exc
                continue
            if traced is not None:
                yield traced


#: Langfuse observations as a trace format (``message_format="langfuse"``).
FORMAT = TraceFormat(calls=model_calls, looks_like=looks_like)
