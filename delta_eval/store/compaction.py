"""Merging a run folder's batches into fewer, larger files: which batches to merge, and the streaming copy of their
rows into one new batch's part files.

A run commits a batch every ``flush_every`` pairs and at least every 5 seconds, a file per dataset each time; a
large run leaves thousands, and every query over the run opens them all (the decision over 1,000,000 verdicts in
1,000 batches took 3x what it takes over one file). At the end of a completed session the run merges them (see
:meth:`~delta_eval.store.folder.RunFolder.compact`): the merged batch names the batches it replaces, so that a
process killed at any point leaves the rows once, in the old batches or in the new one.

The copy reads each part file a row group at a time and writes row groups of DuckDB's size (:data:`ROW_GROUP_ROWS`)
or of :data:`BUFFER_BYTES`, whichever comes first: memory stays bounded by that and by the largest row group read
(a batch's part is one row group: as large in memory as when its batch was committed), not by the batches merged.
Rows keep their order, and files written by an older version read with the current schema (a column they lack
holds nulls, as a view over them shows), but for the conversations' keys, which are filled in from their ids.

Example:
    >>> records = [{"batch": n, "files": {"verdicts": [f"verdicts/part-{n:06d}.parquet"]},
    ...             "sizes": {f"verdicts/part-{n:06d}.parquet": 1_000}} for n in range(1, 21)]
    >>> [len(group) for group in plan(records, at_least=16)]
    [20]
    >>> plan(records)  # too few to be worth a rewrite
    []
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from delta_eval.store.conversation_key import conversation_key, pair_key
from delta_eval.store.tables import SCHEMAS, TABLES

__all__ = ["BUFFER_BYTES", "MIN_BATCHES", "ROW_GROUP_ROWS", "TARGET_BYTES", "copy_rows", "plan"]

#: Rows of a row group in a merged file: DuckDB's own row group size, the unit its scans share between threads.
ROW_GROUP_ROWS = 122_880
#: A row group is written early once its rows hold this many bytes in memory (a dataset of long transcripts).
BUFFER_BYTES = 64 << 20
#: Rows read at a time: few enough that a record batch of long transcripts stays well under :data:`BUFFER_BYTES`.
READ_ROWS = 4_096
#: The size (Parquet bytes over every dataset) a merged batch grows to at most; a batch of half as much or more is
#: left as it is.
TARGET_BYTES = 512 << 20
#: A folder is compacted once it has more than this many batches never merged to merge: below it, a query opens few
#: enough files that rewriting them costs more than it saves (a 1,341-pair run in 28 batches: 0.5 s to merge, for
#: a decision of 0.19 s instead of 0.12).
MIN_BATCHES = 32
#: The columns of a conversation's and a pair's key (see :mod:`delta_eval.store.conversation_key`), filled in from
#: the ids when a file lacks them.
KEYS = {"conversation_key": ("conversation_id", conversation_key), "pair_key": ("pair_id", pair_key)}
#: The fields of a commit record that say nothing about its rows: a record with any other (a population batch's
#: ``kind``) keeps its batch apart.
PLAIN_FIELDS = frozenset({"batch", "files", "rows", "sizes", "at", "run", "replaces", "derived"})


def _size(record: dict[str, Any]) -> int:
    sizes = record.get("sizes") or {}
    return sum(int(v) for v in sizes.values()) if sizes else 1 << 62  # no sizes (an old record): never merged


def plan(records: Iterable[dict[str, Any]], *, target: int = TARGET_BYTES, at_least: int | None = None) -> list[
    list[dict[str, Any]]
]:  # fmt: skip
    """The groups of committed batches (their records, in batch order) to merge, each into one batch of at most
    ``target`` bytes; none unless more than ``at_least`` batches never merged before can be merged. Batches of half
    the target or more, batches with a note (a population batch) and batches without rows stay as they are; a
    batch merged before joins only new batches that together are at least its size (so a row is rewritten a few
    times over a run's life, not at every session's end); a group of one is no group."""
    mergeable = [
        r for r in records
        if set(r) <= PLAIN_FIELDS and r.get("files") and _size(r) < target // 2
    ]  # fmt: skip
    fresh = [r for r in mergeable if "replaces" not in r]
    if len(fresh) <= (MIN_BATCHES if at_least is None else at_least):
        return []
    new_bytes = sum(_size(r) for r in fresh)
    mergeable = [r for r in mergeable if "replaces" not in r or _size(r) <= new_bytes]
    groups: list[list[dict[str, Any]]] = [[]]
    total = 0
    for record in mergeable:
        if groups[-1] and total + _size(record) > target:
            groups.append([])
            total = 0
        groups[-1].append(record)
        total += _size(record)
    return [g for g in groups if len(g) > 1 and any("replaces" not in r for r in g)]


def _batches(source: Path, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """The rows of a part file, :data:`READ_ROWS` at a time, with ``schema``. A file of the current schema is read a
    row group at a time (copying a 40 MB file of 3 KB transcripts peaked at 306 MB this way, 623 MB through a
    dataset scan); one written by an older version through a dataset over it, which reads it with the current
    schema (a column it lacks is nulls, but the conversations' and pairs' keys: see :func:`_with_keys`)."""
    with pq.ParquetFile(source) as file:
        if file.schema_arrow.equals(schema):
            yield from file.iter_batches(batch_size=READ_ROWS)
            return
        had = set(file.schema_arrow.names)
    scan = pads.dataset(source, schema=schema, format="parquet")
    missing = [k for k, (of, _) in KEYS.items() if k in schema.names and k not in had and of in had]
    for batch in scan.to_batches(batch_size=READ_ROWS, batch_readahead=1, fragment_readahead=1):
        for name in missing:
            batch = _with_keys(batch, name)
        yield batch


def _with_keys(batch: pa.RecordBatch, name: str) -> pa.RecordBatch:
    """``batch`` of a file written before its dataset had the key column ``name`` (of :data:`KEYS`), with the keys
    filled in from the ids, as a run writes them now: the merged file's queries group and join on them (each
    distinct id hashed once)."""
    of, key = KEYS[name]
    ids = batch.column(of)
    distinct = pc.unique(ids)
    keys = pa.array([key(c) for c in distinct.to_pylist()], pa.int64())
    filled = keys.take(pc.index_in(ids, distinct))
    return batch.set_column(batch.schema.get_field_index(name), name, filled)


#: What a rewrite keeps of a dataset's rows: called with the dataset's name and a record batch of its rows.
Keep = Callable[[str, pa.RecordBatch], pa.RecordBatch]


def copy_rows(name: str, sources: Iterable[Path], dest: Path, keep: Keep | None = None) -> int:
    """Copy the rows of dataset ``name`` from the part files ``sources`` (in order) into one Parquet file ``dest``,
    those ``keep`` keeps when given; returns the rows written (0: ``dest`` is not created)."""
    schema = SCHEMAS[name]
    skip = TABLES[name].no_statistics
    stats: bool | list[str] = [f.name for f in schema if f.name not in skip] if skip else True
    writer: pq.ParquetWriter | None = None
    held: list[pa.RecordBatch] = []
    rows = held_rows = held_bytes = 0

    def flush() -> None:
        nonlocal writer, held_rows, held_bytes
        if not held:
            return
        if writer is None:
            writer = pq.ParquetWriter(dest, schema, compression="zstd", write_statistics=stats)
        writer.write_table(pa.Table.from_batches(held, schema=schema), row_group_size=held_rows)
        held.clear()
        held_rows = held_bytes = 0

    try:
        for source in sources:
            # A dataset over one file reads it with the current schema: a column an older file lacks is nulls.
            for batch in _batches(source, schema):
                if keep is not None:
                    batch = keep(name, batch)
                if not batch.num_rows:
                    continue
                held.append(batch)
                held_rows += batch.num_rows
                held_bytes += batch.nbytes
                rows += batch.num_rows
                if held_rows >= ROW_GROUP_ROWS or held_bytes >= BUFFER_BYTES:
                    flush()
        flush()
    finally:
        if writer is not None:
            writer.close()
    return rows
