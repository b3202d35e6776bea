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

import copyreg
import dataclasses
import importlib
import io
import marshal
import operator
import pickle
import sqlite3
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from delta_eval.exceptions import RecordError
from delta_eval.ingest.model_calls import RecordedCall, assemble, unchecked_model
from delta_eval.mapping import FieldMapping
from delta_eval.redact import describe_invalid
from delta_eval.schema import CallContext, Conversation, MediaPart, Message, ReasoningState, ToolCall, ToolSpec

__all__ = ["MAX_HELD_CALLS", "TRACE_FORMATS", "TraceFormat", "TracedCall", "conversations_of", "detect_trace_format",
           "read_traces", "trace_format"]  # fmt: skip


# Slotted, not frozen: a frozen dataclass sets each field through object.__setattr__ (4x slower to make), and
# a reading makes several of these per model call. Read-only by convention.
@dataclass(slots=True)
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
    """A trace format: how to find the model calls in its raw records, and how to recognise its first record;
    ``decode_line``, where the format has one, reads a line of a JSON Lines file of its records faster than generic
    JSON parsing does (raising ``ValueError`` on a bad line as :func:`~delta_eval.ingest.readers.parse_json`)."""

    calls: Callable[[Iterable[tuple[str, Any]], str], Iterator[TracedCall | RecordError]]
    looks_like: Callable[[Any], bool]
    decode_line: Callable[[bytes], Any] | None = None


#: How many calls :func:`conversations_of` holds in memory; past that, the calls go to a temporary file and are read
#: back one conversation at a time, so a large trace is read in bounded memory (a source's calls must all be seen
#: before any conversation is known complete: a trace's spans may come in any order). Past the bound, memory grows only
#: by a conversation's key and position (and the reader's note of each span read).
MAX_HELD_CALLS = 10_000

#: The module of :mod:`delta_eval.ingest` reading each trace format, by ``message_format`` name.
#: ``message_format="auto"`` asks them in this order: the formats whose spans say what they are first, OpenTelemetry
#: GenAI (whose attributes other instrumentations may write too) last.
TRACE_FORMATS: dict[str, str] = {
    "openinference": "openinference",
    "langfuse": "langfuse",
    "langsmith": "langsmith",
    "otel": "otel_genai",
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


#: The schema's models a call holds, numbered for the spill.
_MODELS: tuple[type[BaseModel], ...] = (Message, ToolCall, ToolSpec, ReasoningState, MediaPart, CallContext)
_TRACED, _RECORDED = len(_MODELS), len(_MODELS) + 1
_TRACED_FIELDS = operator.attrgetter(*(f.name for f in dataclasses.fields(TracedCall)))
_RECORDED_FIELDS = operator.attrgetter(*(f.name for f in dataclasses.fields(RecordedCall)))


def _spilled(kind: int, *args: Any) -> Any:
    """An object of a spilled call, rebuilt from what :data:`_DISPATCH` saved of it.

    One function rebuilds them all, from the kind's number: each function or class a pickle names costs an import
    lookup where it is written and again where it is read (about 3 us together), and a conversation's calls named
    eight of them. A model is rebuilt as pydantic's own ``__setstate__`` does, without the state dict in between."""
    if kind == _TRACED:
        return TracedCall(*args)
    if kind == _RECORDED:
        return RecordedCall(*args)
    return unchecked_model(_MODELS[kind], *args)


def _model_reducer(kind: int) -> Callable[[BaseModel], tuple[Any, ...]]:
    def reduce(model: BaseModel) -> tuple[Any, ...]:
        return _spilled, (kind, model.__dict__, model.__pydantic_fields_set__, model.__pydantic_extra__,
                          model.__pydantic_private__)  # fmt: skip

    return reduce


#: How the spill pickles a call: pydantic's default goes through ``__getstate__`` and ``__setstate__`` in Python
#: for each message, and was most of the time spent spilling (5x slower than this).
_DISPATCH = copyreg.dispatch_table.copy()
_DISPATCH.update({cls: _model_reducer(kind) for kind, cls in enumerate(_MODELS)})
_DISPATCH[TracedCall] = lambda call: (_spilled, (_TRACED, *_TRACED_FIELDS(call)))
_DISPATCH[RecordedCall] = lambda call: (_spilled, (_RECORDED, *_RECORDED_FIELDS(call)))


def _dumps(obj: Any) -> bytes:
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.dispatch_table = _DISPATCH
    pickler.dump(obj)
    return buffer.getvalue()


class _NotPlain(Exception):
    """A call holds an object :meth:`_Spill.pack` has no plain form for: its conversation is pickled."""


class _Spill:
    """Calls kept in a temporary SQLite file, a conversation's calls packed together (the messages its calls re-send
    are then written once) under the position it first appeared at; read back one conversation at a time, in that
    order, its chunks joined.

    A conversation whose calls hold only drafted messages (:data:`~delta_eval.ingest.model_calls.DraftMessage`), the
    schema's tools and plain or self-reducing fields is written with :mod:`marshal`, as tuples, dicts and strings
    (about 4x faster to write and read back than pickling the same calls, which was a sixth of reading a large
    trace); anything else is pickled."""

    def __init__(self) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="delta-eval-traces-")
        self._db = sqlite3.connect(Path(self._dir.name) / "calls.sqlite")
        # A scratch file, gone at the end: no journal, no fsync.
        self._db.execute("PRAGMA journal_mode = OFF")
        self._db.execute("PRAGMA synchronous = OFF")
        self._db.execute("CREATE TABLE calls (conversation INTEGER, data BLOB)")
        self._batch: list[tuple[int, bytes]] = []
        self._classes: list[type] = []  # the classes of self-reducing fields, by the number written for them

    def add(self, position: int, calls: list[TracedCall]) -> None:
        self._batch.append((position, self.pack(calls)))
        if len(self._batch) >= 256:
            self._flush()

    def _flush(self) -> None:
        self._db.executemany("INSERT INTO calls VALUES (?, ?)", self._batch)
        self._batch.clear()

    def pack(self, calls: list[TracedCall]) -> bytes:
        """A conversation's calls as bytes: marshalled tuples where they have a plain form, else pickled."""
        try:
            tools: dict[int, Any] = {}
            rows = [(c.conversation, c.order, c.label, c.call.input, c.call.output, c.call.system,
                     self._plain_tools(c.call.tools, tools), self._plain_fields(c.fields)) for c in calls]  # fmt: skip
            return b"m" + marshal.dumps(rows, 4)
        # marshal's ValueError: a value of no builtin type (marshal takes only exact builtin types, so what it takes
        # comes back as it was): a model among the messages (a reader's Message, a draft's reasoning), in a dict...
        except (_NotPlain, ValueError):
            return b"p" + _dumps(calls)

    def unpack(self, data: bytes) -> list[TracedCall]:
        """The calls :meth:`pack` packed, equal to them (messages and tools shared as they were)."""
        if data[:1] == b"p":
            calls: list[TracedCall] = pickle.loads(data[1:])
            return calls
        tools: dict[int, tuple[ToolSpec, ...]] = {}
        out = []
        for conversation, order, label, inputs, outputs, system, plain_tools, fields in marshal.loads(data[1:]):
            if plain_tools is not None and (made := tools.get(id(plain_tools))) is None:
                made = tools[id(plain_tools)] = tuple(unchecked_model(ToolSpec, v, set(f)) for v, f in plain_tools)
            call = RecordedCall(inputs, outputs, system, None if plain_tools is None else made)
            kind, value = fields
            out.append(TracedCall(conversation, order, label, call, value if kind < 0 else self._classes[kind](*value)))
        return out

    @staticmethod
    def _plain_tools(specs: tuple[ToolSpec, ...] | None, seen: dict[int, Any]) -> Any:
        # The calls of a conversation share one tuple of tools: one plain form, written once (marshal's references).
        if specs is None:
            return None
        plain = seen.get(id(specs))
        if plain is None:
            if any(type(t) is not ToolSpec or t.__pydantic_extra__ or t.__pydantic_private__ for t in specs):
                raise _NotPlain
            plain = seen[id(specs)] = tuple((t.__dict__, frozenset(t.__pydantic_fields_set__)) for t in specs)
        return plain

    def _plain_fields(self, fields: Mapping[str, Any]) -> tuple[int, Any]:
        if type(fields) is dict:
            return -1, fields
        # Fields that reduce themselves to (their class, its arguments), as a reader's lazy fields do.
        reduced = fields.__reduce__() if type(fields).__reduce__ is not object.__reduce__ else None
        if type(reduced) is not tuple or len(reduced) != 2 or not isinstance(reduced[0], type):
            raise _NotPlain
        cls, args = reduced
        if cls not in self._classes:
            self._classes.append(cls)
        return self._classes.index(cls), args

    def groups(self) -> Iterator[tuple[int, list[TracedCall]]]:
        """Each conversation's calls with its position, in the order of positions."""
        self._flush()
        self._db.execute("CREATE INDEX by_conversation ON calls (conversation)")
        group: list[TracedCall] = []
        current = -1
        # The file holds only what this reading wrote: unpacking it is reading back our own objects.
        for position, data in self._db.execute("SELECT conversation, data FROM calls ORDER BY conversation, rowid"):
            if position != current and group:
                yield current, group
                group = []
            current = position
            group.extend(self.unpack(data))
        if group:
            yield current, group

    def close(self) -> None:
        self._db.close()
        self._dir.cleanup()


#: The fields of a call that is not its conversation's first (nothing reads them).
_NO_FIELDS: Mapping[str, Any] = {}


def _grouped(calls: Iterable[TracedCall | RecordError], max_held: int) -> Iterator[RecordError | list[TracedCall]]:
    """Record errors as they come, then the calls of each conversation, in the order each first appeared.

    Up to ``max_held`` calls are held in memory; past that, the conversations least recently added to go to a
    temporary file (:class:`_Spill`) until half that is held. A trace's spans mostly come close together, so a
    conversation sent there is usually complete: its calls are written once, together; a call that comes later
    is written after them and joins them when read back. Only the conversation keys, and the calls held when the
    source ends (joined to the file's as they are read back), stay in memory."""
    groups: dict[str, list[TracedCall]] = {}  # least recently added to first
    positions: dict[str, int] = {}  # the one thing kept of every conversation
    held = 0
    spill: _Spill | None = None
    try:
        for item in calls:
            if isinstance(item, RecordError):
                yield item
                continue
            key = item.conversation
            positions.setdefault(key, len(positions))
            group = groups.pop(key, None)
            if group is None:
                group = [item]
            elif group[0].order < item.order:
                # Only a conversation's first call is read for id and metadata paths (conversations_of): a later
                # one need not carry its span's attributes, in memory or through the spill's file. (Not tested
                # for emptiness: a lazy mapping would build itself to say.) The first call keeps them: when it
                # came, no call before it was held.
                item.fields = _NO_FIELDS
                group.append(item)
            else:
                group.insert(0, item)  # the earliest held call goes first
            groups[key] = group
            held += 1
            if held > max_held:
                spill = spill or _Spill()
                while held > max_held // 2:
                    old = next(iter(groups))
                    spilled = groups.pop(old)
                    spill.add(positions[old], spilled)
                    held -= len(spilled)
        held_keys = sorted(groups, key=positions.__getitem__)
        if spill is not None:
            # The calls still held need not make the round trip through the file: they are merged in by position,
            # after the calls of their conversation the file holds (those came first).
            i = 0
            for position, spilled in spill.groups():
                while i < len(held_keys) and positions[held_keys[i]] < position:
                    yield groups.pop(held_keys[i])
                    i += 1
                if i < len(held_keys) and positions[held_keys[i]] == position:
                    spilled.extend(groups.pop(held_keys[i]))
                    i += 1
                yield spilled
            held_keys = held_keys[i:]
        for key in held_keys:
            yield groups.pop(key)  # each conversation let go of once assembled
    finally:
        if spill is not None:
            spill.close()


def conversations_of(
    calls: Iterable[TracedCall | RecordError], mapping: FieldMapping, source: str, *, max_held: int = MAX_HELD_CALLS
) -> Iterator[tuple[str, Conversation | RecordError]]:
    """The conversations the calls make, in the order each first appears, as ``(label, conversation)``; a record
    error passes through where it occurs. ``id`` and ``metadata`` paths of ``mapping`` read the ``fields`` of the
    conversation's first call; its tools are the first call's (else ``mapping.tools``). Past ``max_held`` calls,
    the calls wait in a temporary file rather than in memory (:data:`MAX_HELD_CALLS`)."""
    position = -1
    for grouped in _grouped(calls, max_held):
        if isinstance(grouped, RecordError):
            yield grouped.record, grouped
            continue
        group = grouped
        position += 1
        key = group[0].conversation
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
    """The conversations in raw trace ``records`` of format ``fmt`` (a name in :data:`TRACE_FORMATS`); a source
    whose records hold no model call of that format, and no record the format could not read, yields one
    :class:`RecordError` saying so (never an empty source in silence)."""
    seen = [0, 0]  # records read, model calls (or errors) found

    def counted(items: Iterable[tuple[str, Any]]) -> Iterator[tuple[str, Any]]:
        for item in items:
            seen[0] += 1
            yield item

    def found(items: Iterable[TracedCall | RecordError]) -> Iterator[TracedCall | RecordError]:
        for item in items:
            seen[1] += 1  # a call, or a record the format took for one and could not read (its error says why)
            yield item

    yield from conversations_of(found(trace_format(fmt).calls(counted(records), source)), mapping, source)
    if seen[0] and not seen[1]:
        yield "the source", RecordError(source, "the source", "", f"none of its {seen[0]} records holds a model call "
                                        f"in the {fmt!r} trace format")  # fmt: skip
