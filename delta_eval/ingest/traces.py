"""Traces read as conversations: each trace format yields the model calls it finds (one per span, generation or
run), and this module groups them into conversations, orders each conversation's calls and assembles them
(:func:`~delta_eval.ingest.model_calls.assemble`), so each replay point gets the context its own call was sent.

A trace format is a :class:`TraceFormat`: ``calls`` turns the source's raw records into :class:`TracedCall` items
(or a :class:`~delta_eval.exceptions.RecordError` for a record it cannot read), and ``looks_like`` tells, from the
first record, whether a source is in that format (``message_format="auto"``). Each format is a module of
:mod:`delta_eval.ingest` in the format's own vocabulary, holding its ``FORMAT``; :func:`trace_format` loads it by
name.

Example:
    >>> from delta_eval.ingest.model_calls import RecordedCall
    >>> from delta_eval.mapping import FieldMapping
    >>> from delta_eval.schema import Message
    >>> hi, hello = Message(role="user", content="hi"), Message(role="assistant", content="hello")
    >>> calls = [TracedCall("conv-1", (2,), "span b", RecordedCall(input=(hi, hello, Message(role="user",
    ...              content="bye")), output=(Message(role="assistant", content="bye!"),)), {}),
    ...          TracedCall("conv-1", (1,), "span a", RecordedCall(input=(hi,), output=(hello,)), {})]
    >>> [(label, [m.content for m in c.messages]) for label, c in conversations_of(calls, FieldMapping(), "x")]
    [('span a (2 calls, id conv-1)', ['hi', 'hello', 'bye', 'bye!'])]
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from delta_eval.exceptions import RecordError
from delta_eval.ingest.model_calls import RecordedCall, assemble
from delta_eval.mapping import FieldMapping
from delta_eval.redact import describe_invalid
from delta_eval.schema import Conversation

__all__ = ["TRACE_FORMATS", "TraceFormat", "TracedCall", "conversations_of", "detect_trace_format", "read_traces",
           "trace_format"]  # fmt: skip


@dataclass(frozen=True)
class TracedCall:
    """One model call found in a trace.

    ``conversation`` groups calls into one conversation (a conversation or session id where the trace records one,
    else the trace id); ``order`` sorts a conversation's calls (start time first); ``label`` says where the call is
    in the source (``"line 3, span 5 (span id ...)"``); ``fields`` are the values ``id`` and ``metadata`` paths
    read (the span's attributes, the resource's, the span's own fields).
    """

    conversation: str
    order: tuple[Any, ...]
    label: str
    call: RecordedCall
    fields: Mapping[str, Any]


@dataclass(frozen=True)
class TraceFormat:
    """A trace format: how to find the model calls in its raw records, and how to recognise its first record."""

    calls: Callable[[Iterable[tuple[str, Any]], str], Iterator[TracedCall | RecordError]]
    looks_like: Callable[[Any], bool]


#: The module of :mod:`delta_eval.ingest` reading each trace format, by ``message_format`` name.
TRACE_FORMATS: dict[str, str] = {
    "openinference": "openinference",
    "langfuse": "langfuse",
    "langsmith": "langsmith",
}


def trace_format(name: str) -> TraceFormat:
    """The :class:`TraceFormat` named ``name`` (a key of :data:`TRACE_FORMATS`), its module loaded on first use:
    the format modules import this one, and a source that reads no trace loads none of them."""
    module = importlib.import_module(f"delta_eval.ingest.{TRACE_FORMATS[name]}")
    found: TraceFormat = module.FORMAT
    return found


def detect_trace_format(record: Any) -> str | None:
    """The trace format whose record ``record`` looks like, if any (``message_format="auto"``)."""
    return next((name for name in TRACE_FORMATS if trace_format(name).looks_like(record)), None)


def conversations_of(
    calls: Iterable[TracedCall | RecordError], mapping: FieldMapping, source: str
) -> Iterator[tuple[str, Conversation | RecordError]]:
    """The conversations the calls make, in the order each first appears, as ``(label, conversation)``; a record
    error passes through where it occurs. ``id`` and ``metadata`` paths of ``mapping`` read the ``fields`` of the
    conversation's first call; its tools are the first call's (else ``mapping.tools``)."""
    groups: dict[str, list[TracedCall]] = {}
    for item in calls:
        if isinstance(item, RecordError):
            yield item.record, item
            continue
        groups.setdefault(item.conversation, []).append(item)
    for position, (key, group) in enumerate(groups.items()):
        group.sort(key=lambda c: c.order)
        first = group[0]
        label = f"{first.label} ({len(group)} call{'s' if len(group) > 1 else ''}"
        try:
            conv_id = key
            if mapping.id is not None:
                conv_id = mapping.conversation_id(first.fields, source=source, label=label + ")", position=position)
            messages, contexts = assemble([c.call for c in group])
            tools = next((c.call.tools for c in group if c.call.tools is not None), None)
            conv = Conversation(
                id=conv_id,
                messages=messages,
                calls=contexts,
                tools=tools if tools is not None else mapping.tools,
                metadata=mapping.metadata_of(first.fields),
                source=source,
                record=f"{label}, id {conv_id})",
            )
        except RecordError as exc:
            yield label + ")", exc
            continue
        except ValidationError as exc:
            yield label + ")", RecordError(source, f"{label}, id {key})", "", describe_invalid(exc))
            continue
        yield conv.record, conv


def read_traces(
    fmt: str, records: Iterable[tuple[str, Any]], mapping: FieldMapping, source: str
) -> Iterator[tuple[str, Conversation | RecordError]]:
    """The conversations in raw trace ``records`` of format ``fmt`` (a name in :data:`TRACE_FORMATS`)."""
    return conversations_of(trace_format(fmt).calls(records, source), mapping, source)
