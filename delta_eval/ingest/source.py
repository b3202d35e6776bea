"""Conversation sources: a re-iterable stream of validated conversations and the errors of bad records.

A source is read lazily and may be iterated more than once (sampling reads it once to count the population and once
to load the sampled conversations), so a large export never has to fit in memory.

Example:
    >>> import delta_eval as de
    >>> convs = de.read_conversations(de.demo.DEMO_CONVERSATIONS, messages="traj", id="{task_id}/{trial}",
    ...                               metadata=["task_id", "trial", "reward"], tools=de.demo.DEMO_TOOLS)
    >>> good, bad = convs.load()
    >>> len(good), len(bad)
    (200, 0)
"""

from __future__ import annotations

import functools
import itertools
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from delta_eval.exceptions import ConfigError, RecordError, SourceWarning
from delta_eval.gc_thresholds import collector_paused
from delta_eval.ingest.describe import describe_records, nearest_paths
from delta_eval.ingest.native import detect_format, native_conversation
from delta_eval.ingest.pseudonymize import Pseudonymizer
from delta_eval.ingest.readers import READERS, RawRecord, infer_format, iter_jsonl, iter_sql
from delta_eval.ingest.traces import TRACE_FORMATS, detect_trace_format, read_traces, trace_format
from delta_eval.mapping import FieldMapping, MessageFormat, Pseudonymize, SourceConfig
from delta_eval.redact import describe_invalid
from delta_eval.schema import Conversation

__all__ = ["ConversationSource", "open_source", "read_conversations", "read_conversations_sql"]

_T = TypeVar("_T")


class ConversationSource:
    """A named, re-iterable source of :class:`Conversation` records.

    Iterating yields each good conversation, and a :class:`RecordError` in place of each bad record, in source
    order. A repeated conversation id is a bad record (the first one wins). With ``pseudonymize``, each
    conversation's personal data is replaced as it is read (:mod:`delta_eval.ingest.pseudonymize`); the source keeps
    one salt for all its readings, so a conversation is the same each time it is read.
    """

    def __init__(
        self,
        name: str,
        records: Callable[[], Iterable[RawRecord]],
        mapping: FieldMapping,
        pseudonymize: Pseudonymize | None = None,
    ) -> None:
        self.name = name
        self.mapping = mapping
        self._records = records
        self.pseudonymizer = Pseudonymizer(pseudonymize) if pseudonymize is not None else None

    @classmethod
    def of(cls, conversations: ConversationSource | Iterable[Conversation]) -> ConversationSource:
        """``conversations`` itself when it is a source, else a source wrapping them."""
        return conversations if isinstance(conversations, ConversationSource) else cls.from_conversations(conversations)

    @classmethod
    def from_conversations(
        cls,
        conversations: Iterable[Conversation],
        name: str = "conversations",
        *,
        pseudonymize: Pseudonymize | None = None,
    ) -> ConversationSource:
        """Wrap conversations already in memory (their personal data replaced as they are read, with
        ``pseudonymize``)."""
        items = list(conversations)
        for c in items:
            if not isinstance(c, Conversation):
                raise ConfigError(f"expected Conversation objects, got {type(c).__name__}")
        return cls(
            name, lambda: [(c.record or f"record {i}", c) for i, c in enumerate(items)], FieldMapping(), pseudonymize
        )

    def _raw(self) -> Iterable[RawRecord]:
        """The source's records; for a trace (``message_format`` a trace format, or ``auto`` and the first record is
        a span), the conversations its model calls make (:mod:`delta_eval.ingest.traces`)."""
        fmt: str = self.mapping.message_format
        records: Iterable[RawRecord] = self._records()
        if fmt == "auto":
            records = iter(records)
            first = next(records, None)
            if first is None:
                return
            records = itertools.chain([first], records)
            fmt = detect_trace_format(first[1]) or fmt
        if fmt in TRACE_FORMATS:
            yield from read_traces(fmt, records, self.mapping, self.name)
        else:
            yield from records

    def _documents(self) -> Iterator[tuple[str, Any, Any]]:
        """``(label, record, document)``: each record of each document (``records``), or each record as is."""
        base = (self.mapping.records or "").removesuffix("[*]")
        for label, raw in self._raw():
            if self.mapping.records is None or isinstance(raw, RecordError | Conversation):
                yield label, raw, None
                continue
            try:
                items = self.mapping.records_of(raw)
            except ValueError as exc:
                yield label, RecordError(self.name, label, self.mapping.records, str(exc)), None
                continue
            for j, item in enumerate(items):
                yield f"{label}, {base}[{j}]", item, raw

    def _convert(self, fmt: str, raw: Any, label: str, position: int, document: Any) -> Conversation:
        if isinstance(raw, Conversation):
            return raw
        if fmt == "openai":
            return self.mapping.to_conversation(raw, source=self.name, label=label, position=position, root=document)
        return native_conversation(self.mapping, fmt, raw, source=self.name, label=label, position=position,
                                   root=document)  # fmt: skip

    def __iter__(self) -> Iterator[Conversation | RecordError]:
        seen: dict[str, str] = {}
        fmt: str = self.mapping.message_format
        undetected: str | None = None  # why auto-detection failed on the first record: every record says so
        unfilled = set(self.mapping.metadata_paths())  # metadata no record has yet: a misspelt path, said at the end
        first: Any = None
        for position, (label, raw, document) in enumerate(_collector_paused(self._documents())):
            if isinstance(raw, RecordError):
                yield raw
                continue
            if first is None:
                first = raw
            if fmt == "auto" and not isinstance(raw, Conversation):
                try:
                    fmt = detect_format(raw, self.mapping)
                except ValueError as exc:
                    fmt, undetected = "undetected", str(exc)
            if undetected is not None:
                yield RecordError(self.name, label, "message_format", undetected)
                continue
            try:
                conv = self._convert(fmt, raw, label, position, document)
            except RecordError as exc:
                yield exc
                continue
            if conv.id in seen:
                yield RecordError(
                    self.name,
                    label,
                    "id",
                    f"duplicate conversation id {conv.id!r} (first in {seen[conv.id]})",
                )
                continue
            seen[conv.id] = label
            if unfilled:
                unfilled -= {name for name in unfilled if conv.metadata.get(name) is not None}
            yield self.pseudonymizer.conversation(conv) if self.pseudonymizer is not None else conv
        if seen and unfilled:
            self._warn_unfilled(sorted(unfilled), first)

    def _warn_unfilled(self, names: list[str], first: Any) -> None:
        paths = self.mapping.metadata_paths()
        for name in names:
            path = paths[name]
            near = nearest_paths(path.removeprefix("$."), [first] if isinstance(first, Mapping) else [])
            hint = f"; nearest names in the first record: {', '.join(near)}" if near else ""
            warnings.warn(
                f"metadata field {name!r} (path {path!r}) is in no record of {self.name}: it is empty for every "
                f"conversation{hint}",
                SourceWarning,
                stacklevel=3,
            )

    def describe(self) -> str:
        """What the source's first record holds, in a sentence: what is at the ``messages`` path, the record's
        fields, and the format it looks like when that is not the one set. The end of the error that says why a
        source gave nothing to replay."""
        records = [raw for _, raw in itertools.islice(self._records(), 1) if not isinstance(raw, RecordError)]
        hint = None
        if records and not isinstance(records[0], Conversation):
            looks = detect_trace_format(records[0])
            if looks is None:
                try:
                    looks = detect_format(records[0], self.mapping)
                except ValueError:
                    looks = None
            if looks is not None and looks != self.mapping.message_format:
                hint = f"it looks like {looks!r} records: message_format={looks!r} reads them"
        return describe_records(records, self.mapping, hint)

    def load(self) -> tuple[list[Conversation], list[RecordError]]:
        """Read everything: the good conversations and the errors, each in source order."""
        good: list[Conversation] = []
        bad: list[RecordError] = []
        for item in self:
            (bad if isinstance(item, RecordError) else good).append(item)  # type: ignore[arg-type]
        return good, bad

    def __repr__(self) -> str:
        return f"ConversationSource({self.name!r})"


_END = object()


def _collector_paused(items: Iterable[_T]) -> Iterator[_T]:
    """``items``, with the cyclic garbage collector paused while each is parsed (and running as usual while the
    caller works on it). Parsing allocates many short-lived containers and no cycles, so the collector's passes free
    nothing there and cost about a third of a trace's reading time; reference counting frees what parsing drops."""
    it = iter(items)
    while True:
        with collector_paused():  # counted: sources read on several threads at once
            item = next(it, _END)
        if item is _END:
            return
        yield item  # type: ignore[misc]


def _described(**fields: Any) -> SourceConfig:
    # The Python readers and a config file's [source] are one description, opened one way.
    try:
        return SourceConfig(**fields)
    except ValidationError as exc:
        raise ConfigError(describe_invalid(exc)) from None


def read_conversations(
    path: str | Path,
    *,
    format: str | None = None,
    messages: str = "messages",
    id: str | None = None,
    metadata: Sequence[str] | Mapping[str, str] | None = None,
    tools: str | Path | Sequence[Any] | None = None,
    tools_field: str | None = "tools",
    records: str | None = None,
    message_fields: Mapping[str, str] | None = None,
    roles: Mapping[str, str | None] | None = None,
    skip: Mapping[str, Any] | None = None,
    pseudonymize: Pseudonymize | None = None,
    message_format: MessageFormat = "openai",
) -> ConversationSource:
    """Read conversations (OpenAI chat, or a provider's native format: ``message_format``) from a JSON list, a
    JSONL file or Parquet (file or folder).

    Args:
        path: the file (``.json``, ``.jsonl``/``.ndjson``, optionally ``.gz``; ``.parquet``) or a Parquet folder.
        format: ``json``, ``jsonl`` or ``parquet`` when the suffix does not tell.
        messages: dotted path to each record's message list.
        id: id field path or template (``"{task_id}/{trial}"``); default: the ``id`` field, else the position.
        metadata: fields to keep, as paths or ``{name: path}``; usable as sampling strata and prompt variables.
        tools: tool specs for every conversation: a JSON file path or a list.
        tools_field: per-record tool specs path, used instead of ``tools`` when a record has it.
        records: for nested exports, the path of the conversation records in each document
            (``"simulations[*]"``); metadata paths starting with ``$.`` then read the document.
        message_fields: message fields kept under other names, ``{canonical: source}`` (``{"tool_call_id": "id"}``).
        roles: source roles renamed (``{"human": "user"}``), or left out (``None``).
        skip: messages and tool calls with these field values are left out (``{"requestor": "user"}``).
        pseudonymize: personal data replaced by fake values of the same shape as records are read
            (:class:`~delta_eval.mapping.Pseudonymize`).
        message_format: ``openai`` (chat messages), a provider's native request body (``anthropic``, ``gemini``,
            ``openai-responses``; see :class:`~delta_eval.mapping.FieldMapping`), or ``auto`` (told from the first
            record).

    Bad records do not raise: they are yielded as :class:`RecordError` and end up in the run's ``errors`` table.

    Example (a tau2-bench results file)::

        read_conversations("results.json", records="simulations[*]", id="{task_id}/{trial}",
                           message_fields={"tool_call_id": "id"}, skip={"requestor": "user"},
                           metadata={"reward": "reward_info.reward", "domain": "$.info.environment_info.domain_name"})
    """
    return open_source(
        _described(
            path=path,
            format=format,
            messages=messages,
            id=id,
            metadata=metadata or (),
            tools=tools,
            tools_field=tools_field,
            records=records,
            message_fields=message_fields or {},
            roles=roles or {},
            skip=skip or {},
            pseudonymize=pseudonymize,
            message_format=message_format,
        )
    )


def _file_source(
    path: Path, format: str | None, mapping: FieldMapping, pseudonymize: Pseudonymize | None = None
) -> ConversationSource:
    if not path.exists():
        raise ConfigError(f"conversation file not found: {path}")
    fmt = format or infer_format(path)
    if fmt not in READERS:
        raise ConfigError(f"unknown format {fmt!r}; expected one of {', '.join(READERS)}")
    reader = READERS[fmt]
    if fmt == "jsonl" and mapping.message_format in TRACE_FORMATS:
        decode = trace_format(mapping.message_format).decode_line
        if decode is not None:  # the trace format reads its own lines (OTLP/JSON into typed structs)
            reader = functools.partial(iter_jsonl, decode=decode)
    return ConversationSource(str(path), lambda: reader(path), mapping, pseudonymize)


def read_conversations_sql(
    query: str,
    *,
    database: str | None = None,
    messages: str = "messages",
    id: str | None = None,
    metadata: Sequence[str] | Mapping[str, str] | None = None,
    tools: str | Path | Sequence[Any] | None = None,
    tools_field: str | None = "tools",
    records: str | None = None,
    message_fields: Mapping[str, str] | None = None,
    roles: Mapping[str, str | None] | None = None,
    skip: Mapping[str, Any] | None = None,
    pseudonymize: Pseudonymize | None = None,
    message_format: MessageFormat = "openai",
) -> ConversationSource:
    """Read conversations from a DuckDB query, e.g. ``SELECT * FROM read_parquet('logs/*.parquet') WHERE ...``.

    Nested columns may be DuckDB lists/structs or JSON text. ``database`` is a DuckDB file opened read-only.
    The mapping arguments are those of :func:`read_conversations`.
    """
    return open_source(
        _described(
            sql=query,
            database=database,
            messages=messages,
            id=id,
            metadata=metadata or (),
            tools=tools,
            tools_field=tools_field,
            records=records,
            message_fields=message_fields or {},
            roles=roles or {},
            skip=skip or {},
            pseudonymize=pseudonymize,
            message_format=message_format,
        )
    )


def _sql_source(
    query: str, database: str | None, mapping: FieldMapping, pseudonymize: Pseudonymize | None = None
) -> ConversationSource:
    name = f"sql: {' '.join(query.split())[:200]}"
    return ConversationSource(name, lambda: iter_sql(query, database), mapping, pseudonymize)


def open_source(config: SourceConfig) -> ConversationSource:
    """The conversation source a :class:`~delta_eval.mapping.SourceConfig` describes (a config file's ``[source]``).

    Example:
        >>> import delta_eval as de
        >>> source = open_source(de.SourceConfig(path=de.demo.DEMO_CONVERSATIONS, messages="traj"))
        >>> source.name.endswith("gpt-4o-airline.json")
        True
    """
    if config.sql is not None:
        return _sql_source(config.sql, config.database, config, config.pseudonymize)
    assert config.path is not None  # the config validates that it has one of the two
    return _file_source(config.path, config.format, config, config.pseudonymize)
