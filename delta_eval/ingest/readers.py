"""Raw record readers: JSON (a list), JSONL, Parquet and a DuckDB SQL query.

Each reader yields ``(label, record)`` pairs, where the label says where the record is (``line 7``, ``record 3``,
``row 12``) and the record is a mapping, or a :class:`RecordError` when the record itself could not be read (a
malformed JSON line). Readers stream: JSONL, Parquet and SQL never hold more than one batch in memory.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from delta_eval.exceptions import ConfigError, RecordError

__all__ = ["READERS", "RawRecord", "infer_format", "iter_json", "iter_jsonl", "iter_parquet", "iter_sql"]

RawRecord = tuple[str, Any]
_BATCH_ROWS = 1024
_ARROW_READERS = ("to_arrow_reader", "fetch_arrow_reader")


def infer_format(path: Path) -> str:
    """The reader for a path, from its suffix (``.json``, ``.jsonl``/``.ndjson``, ``.parquet`` or a folder)."""
    if path.is_dir():
        return "parquet"
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes[-1:] == [".gz"]:
        suffixes = suffixes[:-1]
    last = suffixes[-1] if suffixes else ""
    if last in (".jsonl", ".ndjson"):
        return "jsonl"
    if last == ".json":
        return "json"
    if last in (".parquet", ".pq"):
        return "parquet"
    raise ConfigError(f"cannot tell the format of {path}: name it .json, .jsonl or .parquet, or pass format=")


def _open_text(path: Path) -> Any:
    if path.suffix.lower() == ".gz":
        import gzip

        return gzip.open(path, "rt", encoding="utf-8")
    return path.open(encoding="utf-8")


def iter_json(path: Path) -> Iterator[RawRecord]:
    """Records of a JSON file holding a list of objects (or one object)."""
    with _open_text(path) as fh:
        try:
            data = json.load(fh)
        except ValueError as exc:
            raise ConfigError(f"{path}: not valid JSON ({exc}); for one record per line use format='jsonl'") from None
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        raise ConfigError(f"{path}: expected a JSON list of conversation records, got {type(data).__name__}")
    for i, rec in enumerate(data):
        yield f"record {i}", rec


def iter_jsonl(path: Path) -> Iterator[RawRecord]:
    """Records of a JSON Lines file; a line that is not valid JSON yields a :class:`RecordError`."""
    with _open_text(path) as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            label = f"line {lineno}"
            try:
                yield label, json.loads(line)
            except ValueError as exc:
                yield label, RecordError(str(path), label, "", f"not valid JSON: {exc}")


def iter_parquet(path: Path) -> Iterator[RawRecord]:
    """Rows of a Parquet file or folder of Parquet files, one batch at a time."""
    import pyarrow.dataset as ds

    dataset = ds.dataset(str(path), format="parquet")
    row = 0
    for batch in dataset.to_batches(batch_size=_BATCH_ROWS):
        for rec in batch.to_pylist():
            yield f"row {row}", rec
            row += 1


def iter_sql(query: str, database: str | None = None) -> Iterator[RawRecord]:
    """Rows of a DuckDB query (over any file DuckDB reads, or tables of ``database``), one batch at a time."""
    import duckdb

    con = duckdb.connect(database or ":memory:", read_only=database is not None)
    try:
        try:
            relation = con.sql(query)
            # DuckDB 2.0 renamed fetch_arrow_reader to to_arrow_reader; take whichever this version has.
            to_reader = next(m for m in (getattr(relation, n, None) for n in _ARROW_READERS) if m is not None)
            reader = to_reader(_BATCH_ROWS)
        except duckdb.Error as exc:
            raise ConfigError(f"the source query failed: {exc}") from None
        row = 0
        for batch in reader:
            for rec in batch.to_pylist():
                yield f"row {row}", rec
                row += 1
    finally:
        con.close()


#: The file readers by format name.
READERS: dict[str, Callable[[Path], Iterator[RawRecord]]] = {
    "json": iter_json,
    "jsonl": iter_jsonl,
    "parquet": iter_parquet,
}
