"""Any table of rows as the metrics read it: an Arrow table, a DuckDB relation, a pandas or polars DataFrame, or an
iterable of mappings. Metrics take whichever the user has, so numbers can be recomputed from one's own queries.

Example:
    >>> rows_of([{"outcome": "tie", "extra": 1}], ["outcome"])
    [{'outcome': 'tie'}]
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa

__all__ = ["Rows", "fetch_table", "rows_of", "to_arrow"]

#: What a metric accepts as a table of rows.
Rows = Any

# DuckDB 2 warns that Arrow from a result of execute costs a copy (see fetch_table, which takes that path only when
# it must). The warning names the line that asked, so the filter silences it for this module's calls alone; it is
# put back in front before each such call when a filter added since (``simplefilter("error")``, pytest's per-test
# filters) or a ``catch_warnings()`` block that ended has hidden or dropped it: a ``catch_warnings()`` around each
# call would swap the process's filters under every other thread.
_COPY_WARNING = "Arrow output on a DB-API result"
_MODULE = re.escape(__name__) + r"\Z"
_quiet_filter: Any = None  # the filter as it stands in warnings.filters, once added


def _quiet() -> None:
    global _quiet_filter
    if _quiet_filter is None or not warnings.filters or warnings.filters[0] != _quiet_filter:
        warnings.filterwarnings("ignore", message=_COPY_WARNING, category=UserWarning, module=_MODULE)
        _quiet_filter = warnings.filters[0]


def to_arrow(data: Any) -> pa.Table:
    """``data`` as an Arrow table: a DuckDB result or relation (whichever name this DuckDB gives the method), a
    polars or pandas frame, an Arrow table or batch."""
    table = _arrow(data)
    if table is None:
        raise TypeError(f"cannot read a {type(data).__name__} as a table")
    return table


def fetch_table(db: Any, sql: str, params: Sequence[Any] = ()) -> pa.Table:
    """The rows of ``sql`` run on the DuckDB connection ``db`` as an Arrow table."""
    # Arrow straight from DuckDB: text stays in Arrow buffers (through numpy, each value became a Python object).
    table = _related(db, sql, params)
    if table is None:
        table = _executed(db, sql, params)
    # Text as plain strings, whatever Arrow encoding the connection's settings give it (large strings or string
    # views), as the metrics read it.
    text = pa.schema([pa.field(f.name, pa.string()) if pa.types.is_large_string(f.type) or
                      pa.types.is_string_view(f.type) else f for f in table.schema])  # fmt: skip
    return table if text.equals(table.schema) else table.cast(text)


def _related(db: Any, sql: str, params: Sequence[Any]) -> pa.Table | None:
    """Through a relation, as DuckDB 2 asks (no copy of the result: a third less CPU over 2M rows); ``None`` where
    that path is closed: before DuckDB 2 (whose relations would end a caller's unfinished result of ``execute``
    unasked), or while a caller's result of ``execute`` is unfinished (DuckDB 2 refuses relations until it is)."""
    import duckdb

    in_use = getattr(duckdb, "ResourceInUseException", None)
    if in_use is None or int(duckdb.__version__.split(".")[0]) < 2:
        return None
    try:
        table: pa.Table = db.sql(sql, params=list(params) or None).to_arrow_table()
    except in_use:
        return None
    return table


def _executed(db: Any, sql: str, params: Sequence[Any]) -> pa.Table:
    result = db.execute(sql, list(params))
    # DuckDB 2 names it to_arrow_table (and warns of the copy: silenced for this module); before, the connection's
    # fetch_arrow_table.
    fetch = getattr(result, "to_arrow_table", None) or result.fetch_arrow_table
    _quiet()
    table: pa.Table = fetch()
    return table


def _arrow(data: Any) -> pa.Table | None:
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    # DuckDB relations (and DuckDB results) give Arrow; polars has to_arrow(); pandas goes through pyarrow.
    for method in ("to_arrow_table", "fetch_arrow_table", "arrow", "to_arrow"):
        fn = getattr(data, method, None)
        if callable(fn):
            got = fn()
            if isinstance(got, pa.RecordBatchReader):
                got = got.read_all()
            if isinstance(got, pa.Table):
                return got
    if type(data).__module__.startswith("pandas"):
        return pa.Table.from_pandas(data, preserve_index=False)
    return None


def rows_of(data: Rows, columns: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """The rows of ``data`` as dicts, with only ``columns`` (those it has) when given."""
    table = _arrow(data)
    if table is not None:
        if columns is not None:
            table = table.select([c for c in columns if c in table.column_names])
        rows: list[dict[str, Any]] = table.to_pylist()
        return rows
    if isinstance(data, Iterable) and not isinstance(data, str | bytes | Mapping):
        out = []
        for row in data:
            if not isinstance(row, Mapping):
                raise TypeError(f"expected rows as mappings, got {type(row).__name__}")
            out.append({k: row[k] for k in columns if k in row} if columns is not None else dict(row))
        return out
    raise TypeError(
        f"expected an Arrow table, a DuckDB relation, a DataFrame or rows of mappings, not {type(data).__name__}"
    )
