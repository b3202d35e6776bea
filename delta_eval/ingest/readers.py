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

from delta_eval.duckdb_connect import connect
from delta_eval.exceptions import ConfigError, RecordError

__all__ = [
    "READERS",
    "RawRecord",
    "infer_format",
    "iter_json",
    "iter_jsonl",
    "iter_parquet",
    "iter_sql",
    "parse_json",
]

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


def _open_binary(path: Path) -> Any:
    if path.suffix.lower() == ".gz":
        import gzip

        return gzip.open(path, "rb")
    # A large buffer: a trace file's lines (an OTLP export request) are often hundreds of kilobytes, read a buffer
    # at a time.
    return path.open("rb", buffering=1 << 20)


def parse_json(text: str | bytes) -> Any:
    """``json.loads``, with nesting too deep for the parser reported as a ``ValueError`` like any bad JSON.

    Example:
        >>> parse_json('{"a": [1]}')
        {'a': [1]}
        >>> try:
        ...     parse_json("[" * 5000 + "]" * 5000)
        ... except ValueError as exc:
        ...     print(exc)
        JSON nested too deep (more than the parser's limit of about 1,000 levels)
    """
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deep (more than the parser's limit of about 1,000 levels)") from None


def _read_error(path: Path, label: str, exc: BaseException) -> RecordError:
    if isinstance(exc, UnicodeDecodeError):
        return RecordError(str(path), label, "", f"not valid UTF-8 (byte 0x{exc.object[exc.start]:02x} at column "
                           f"{exc.start + 1})")  # fmt: skip
    return RecordError(str(path), label, "", f"not valid JSON: {exc}")


def _cut_short(path: Path, after: str, exc: BaseException) -> RecordError:
    """The error of a file that ends early (a truncated .gz, an unreadable tail): what was read before stays."""
    return RecordError(str(path), after, "", f"the file ends early or is damaged here ({type(exc).__name__}: {exc}); "
                       "the records before this point were read")  # fmt: skip


def iter_json(path: Path) -> Iterator[RawRecord]:
    """Records of a JSON file holding a list of objects (or one object). A file that cannot be read as JSON is
    one bad record (naming why), not a crash: a run over it ends saying no conversation could be read."""
    try:
        with _open_binary(path) as fh:
            raw = fh.read()
    except Exception as exc:  # EOFError, BadGzipFile, zlib.error: a truncated or damaged compressed file
        yield "the file", _cut_short(path, "the file", exc)
        return
    try:
        data = parse_json(raw.decode("utf-8"))
    except ValueError as exc:
        hint = "; for one record per line name it .jsonl or pass format='jsonl'"
        yield "the file", RecordError(str(path), "the file", "", _read_error(path, "", exc).reason + hint)
        return
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        yield (
            "the file",
            RecordError(
                str(path), "the file", "", f"expected a JSON list of conversation records, got {type(data).__name__}"
            ),
        )
        return
    for i, rec in enumerate(data):
        yield f"record {i}", rec


def _parse_line(line: bytes) -> Any:
    return parse_json(line.decode("utf-8"))


def iter_jsonl(path: Path, decode: Callable[[bytes], Any] = _parse_line) -> Iterator[RawRecord]:
    """Records of a JSON Lines file; a line that is not valid UTF-8 or JSON yields a :class:`RecordError`, and so
    does a file that ends early (a truncated ``.gz``), after the lines before it. ``decode`` reads a line (a trace
    format may decode its own lines faster); it raises ``ValueError`` as :func:`parse_json` does."""
    lineno = 0
    with _open_binary(path) as fh:
        while True:
            try:
                line = fh.readline()
            except Exception as exc:  # EOFError, BadGzipFile, zlib.error: the file is cut short or damaged
                yield f"after line {lineno}", _cut_short(path, f"after line {lineno}", exc)
                return
            if not line:
                return
            lineno += 1
            if not line.strip():
                continue
            label = f"line {lineno}"
            try:
                yield label, decode(line)
            except ValueError as exc:  # UnicodeDecodeError is a ValueError
                yield label, _read_error(path, label, exc)


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

    con = connect(database or ":memory:", read_only=database is not None)
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
