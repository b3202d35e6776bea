"""The population table: one small row per conversation of the source, which sampling runs its SQL on.

Reading the source to build it keeps only ids, counts and what the sample's strata and ``where`` read: the metadata
fields they name (``metadata``, the whole record's as JSON, only when they name it), never messages, so the
population of a large export fits in memory where the export would not, and a run's memory does not grow with its
source. The names of the other metadata fields are kept (:func:`~delta_eval.sampling.stratified.present_fields`),
for the errors that suggest one.
Bad records and failing stratum functions become error rows.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import pyarrow as pa

from delta_eval.exceptions import RecordError
from delta_eval.ingest.source import ConversationSource
from delta_eval.sampling.stratified import PRESENT_FIELDS, Stratified
from delta_eval.schema import Conversation, ErrorRecord

__all__ = ["RESERVED_COLUMNS", "build_population", "iter_selected", "stratum_value"]

RESERVED_COLUMNS = ("position", "conversation_id", "n_messages", "metadata")
# SQL string literals (left out: they name no column), then identifiers, bare or double-quoted.
_LITERAL = re.compile(r"'(?:[^']|'')*'")
_IDENTIFIER = re.compile(r'"((?:[^"]|"")*)"|([A-Za-z_][A-Za-z0-9_$]*)')


def _named(spec: Stratified) -> set[str]:
    """The names (lower-cased: DuckDB's identifiers are not case-sensitive) the sample's strata and ``where`` may
    read: ``by``, and every identifier of their SQL. A word that is not a column only keeps a field it happens to
    name."""
    names = {name.lower() for name in spec.by}
    for sql in [*spec.sql_strata().values(), spec.where or ""]:
        for quoted, bare in _IDENTIFIER.findall(_LITERAL.sub(" ", sql)):
            names.add(quoted.replace('""', '"').lower() if quoted else bare.lower())
    return names


def stratum_value(value: Any) -> str | None:
    """A metadata or stratum value as the text it is grouped by (JSON for anything but strings)."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def build_population(
    source: ConversationSource | Iterable[Conversation | RecordError],
    spec: Stratified,
    on_error: Callable[[ErrorRecord], None],
    counters: Mapping[str, Callable[[Conversation], int]] | None = None,
) -> pa.Table:
    """Read the source once and return the population table (positions follow the source's iteration order).

    ``counters`` adds integer columns computed per conversation (the pipeline counts replay points this way). Only
    the metadata fields ``spec`` names are kept as columns (see the module docstring).
    """
    functions = spec.python_strata()
    counters = counters or {}
    named = _named(spec)
    keep_json = "metadata" in named
    present: set[str] = set()
    rows: dict[str, list[Any]] = {name: [] for name in RESERVED_COLUMNS}
    counted: dict[str, list[int]] = {name: [] for name in counters}
    extra: dict[str, list[str | None]] = {}
    count = 0

    def put(name: str, value: str | None) -> None:
        col = extra.setdefault(name, [None] * count)
        col.append(value)

    for position, item in enumerate(source):
        if isinstance(item, RecordError):
            on_error(ErrorRecord.from_exception(item, "ingest"))
            continue
        derived: dict[str, str | None] = {}
        try:
            for name, fn in functions.items():
                derived[name] = stratum_value(fn(item))
        except Exception as exc:  # a user's function: any failure is that record's error, not the run's
            on_error(
                ErrorRecord.from_exception(
                    exc,
                    "sample",
                    message=f"derived stratum {name!r} failed on conversation {item.id!r}: {type(exc).__name__}: {exc}",
                    source=item.source,
                    record=item.record,
                    field=name,
                    conversation_id=item.id,
                )
            )
            continue
        rows["position"].append(position)
        rows["conversation_id"].append(item.id)
        rows["n_messages"].append(len(item.messages))
        if keep_json:
            rows["metadata"].append(json.dumps(item.metadata, ensure_ascii=False, default=str))
        for name, count_fn in counters.items():
            counted[name].append(count_fn(item))
        for key, value in item.metadata.items():
            if key not in RESERVED_COLUMNS and key not in functions and key not in counters:
                if value is not None:
                    present.add(key)
                if key.lower() in named:
                    put(key, stratum_value(value))
        for name, value in derived.items():
            put(name, value)
        count += 1
        for col in extra.values():
            if len(col) < count:
                col.append(None)
    for name in functions:  # a function that failed on every record still names its column (all missing)
        extra.setdefault(name, [None] * count)
    table = pa.table(
        {
            "position": pa.array(rows["position"], pa.int64()),
            "conversation_id": pa.array(rows["conversation_id"], pa.string()),
            "n_messages": pa.array(rows["n_messages"], pa.int32()),
            **({"metadata": pa.array(rows["metadata"], pa.string())} if keep_json else {}),
            **{name: pa.array(values, pa.int64()) for name, values in counted.items()},
            **{name: pa.array(values, pa.string()) for name, values in extra.items()},
        }
    )
    return table.replace_schema_metadata({PRESENT_FIELDS: json.dumps(sorted(present))})


def iter_selected(
    source: ConversationSource | Iterable[Conversation | RecordError], positions: Iterable[int]
) -> Iterable[tuple[int, Conversation]]:
    """The conversations at the given positions, read again from the source in one pass."""
    wanted = set(positions)
    if not wanted:
        return
    last = max(wanted)
    for position, item in enumerate(source):
        if position in wanted and isinstance(item, Conversation):
            yield position, item
        if position >= last:
            return
