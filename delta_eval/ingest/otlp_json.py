"""OTLP/JSON export lines (the Collector's file exporter: one ``{"resourceSpans": [...]}`` per line) decoded
straight into typed structs, for the OpenTelemetry GenAI reader (:mod:`delta_eval.ingest.otel_genai`).

Generic JSON parsing builds a dict for every span, key-value and scope and reads most of them once; here msgspec
decodes the fields the reader uses into :class:`Export` structs and skips the rest (``kind``, ``status``, ``scope``,
``endTimeUnixNano``...). A line this shape does not fit (bad JSON, a span that is not an object, an attribute
without a string key, a flat span row) is parsed by :func:`~delta_eval.ingest.readers.parse_json` as any JSON line
is, so the reader's errors on it are the same, word for word.

Example:
    >>> record = decode_line(b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"name": "chat", "attributes": '
    ...                      b'[{"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}}]}]}]}]}')
    >>> span = record.export.resourceSpans[0].scopeSpans[0].spans[0]
    >>> span.name, span.attributes[0].value, record["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["name"]
    ('chat', {'stringValue': 'chat'}, 'chat')
    >>> decode_line(b'{"spanId": "eee19b7ec3c1b174", "name": "chat"}')  # a flat span row: parsed as JSON
    {'spanId': 'eee19b7ec3c1b174', 'name': 'chat'}
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import msgspec

from delta_eval.ingest.readers import parse_json

__all__ = ["Export", "ExportRecord", "KeyValue", "ResourceSpans", "Span", "decode_line"]


class KeyValue(msgspec.Struct):
    """An attribute; its OTLP ``AnyValue`` stays a dict (it holds one of seven kinds, read by ``any_value``)."""

    key: str
    value: dict[str, Any] | None = None


class Span(msgspec.Struct):
    """The fields of a span the reader reads (named as OTLP/JSON names them); the ids and times are checked by it,
    as for a parsed span."""

    traceId: Any = None
    spanId: Any = None
    name: Any = None
    startTimeUnixNano: Any = None
    attributes: list[KeyValue] | None = None
    events: Any = None


class ScopeSpans(msgspec.Struct):
    spans: list[Span] | None = None


class Resource(msgspec.Struct):
    attributes: list[KeyValue] | None = None


class ResourceSpans(msgspec.Struct):
    resource: Resource | None = None
    scopeSpans: list[ScopeSpans] | None = None


class Export(msgspec.Struct):
    """An export request: its spans typed, its log records (rarer, of the older event form) as parsed JSON."""

    resourceSpans: list[ResourceSpans] | msgspec.UnsetType | None = msgspec.UNSET
    resourceLogs: Any = msgspec.UNSET


class LazyMapping(Mapping[str, Any]):
    """A read-only mapping whose values are built on first use (:meth:`_build`), for what most records never have
    read: a subclass sets ``_built = None`` and builds the dict."""

    __slots__ = ("_built",)
    _built: dict[str, Any] | None

    def _build(self) -> dict[str, Any]:
        raise NotImplementedError

    def _values(self) -> dict[str, Any]:
        if self._built is None:
            self._built = self._build()
        return self._built

    def __getitem__(self, key: str) -> Any:
        return self._values()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values())

    def __len__(self) -> int:
        return len(self._values())


class ExportRecord(LazyMapping):
    """A decoded export line: ``export`` for the reader, and the line as a parsed JSON object (parsed on first use)
    for everything else that looks at a source's records (format detection, a source's description)."""

    __slots__ = ("_line", "export")

    def __init__(self, export: Export, line: bytes) -> None:
        self.export, self._line = export, line
        self._built = None

    def _build(self) -> dict[str, Any]:
        return parse_json(self._line.decode("utf-8"))  # type: ignore[no-any-return]


_DECODER = msgspec.json.Decoder(Export)
# An export line starts with its first key (the Collector writes resourceSpans or resourceLogs first); any other
# line (a flat span row) skips the typed decoding it would fail.
_HEADS = (b'{"resourceSpans"', b'{"resourceLogs"')


def decode_line(line: bytes) -> Any:
    """A JSON line of an OTLP/JSON file: an :class:`ExportRecord` when it is an export request of the usual shape,
    else the line parsed as JSON (raising as :func:`~delta_eval.ingest.readers.parse_json` does)."""
    if line[:32].lstrip().startswith(_HEADS):
        try:
            export = _DECODER.decode(line)
        except (msgspec.DecodeError, RecursionError):  # not this shape, or not JSON: the generic parse says which
            pass
        else:
            return ExportRecord(export, line)
    return parse_json(line.decode("utf-8"))
