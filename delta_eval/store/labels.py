"""People's labels of pairs, saved beside the run: ``RUN_DIR/labels/``, one small Parquet file per batch of labels.

A label says what a person thinks of a pair: ``candidate`` (the candidate is better), ``baseline``, ``same``, or
``judge_wrong`` (the verdict is wrong, without saying which side is better), with a free note, who labelled
(``user``) and when (``at``, UTC). Files are only ever added, never rewritten: a person who changes their mind adds
a newer label, and :func:`latest_labels` keeps each person's newest label of each pair. Nothing else in the run
folder is touched, so labelling a run never changes what it measured.

Example:
    >>> import tempfile
    >>> run = Path(tempfile.mkdtemp())
    >>> _ = write_labels(run, [Label(pair_id="c1#0", label="baseline", note="skipped the refund")], user="ana")
    >>> _ = write_labels(run, [Label(pair_id="c1#0", label="same")], user="ana")
    >>> [(r["pair_id"], r["label"], r["user"]) for r in latest_labels(run).to_pylist()]
    [('c1#0', 'same', 'ana')]
"""

from __future__ import annotations

import io
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict, Field

from delta_eval.store import safe_paths

__all__ = [
    "LABELS",
    "LABELS_DIR",
    "LABEL_SCHEMA",
    "Label",
    "LabelValue",
    "latest_labels",
    "read_labels",
    "write_labels",
]

LabelValue = Literal["candidate", "baseline", "same", "judge_wrong"]
#: What a person can say of a pair, in the order a labelling form offers them.
LABELS: tuple[LabelValue, ...] = ("candidate", "baseline", "same", "judge_wrong")
#: The folder of the run folder that holds the labels.
LABELS_DIR = "labels"
LABEL_SCHEMA = pa.schema(
    [
        ("pair_id", pa.string()),
        ("label", pa.string()),
        ("note", pa.string()),
        ("user", pa.string()),
        ("at", pa.timestamp("us", tz="UTC")),
    ]
)


class Label(BaseModel):
    """One person's word on one pair (``user`` and ``at`` are set when the batch is written)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    pair_id: str = Field(min_length=1)
    label: LabelValue
    note: str = ""


def write_labels(run_dir: str | Path, labels: Sequence[Label], *, user: str, at: datetime | None = None) -> Path:
    """Add ``labels`` as one new file under ``RUN_DIR/labels`` (written atomically, never through a link) and
    return its path."""
    if not labels:
        raise ValueError("no labels to write")
    if not user.strip():
        raise ValueError("say who labels (a user name)")
    root = Path(run_dir)
    when = at or datetime.now(UTC)
    table = pa.table(
        {
            "pair_id": [x.pair_id for x in labels],
            "label": [x.label for x in labels],
            "note": [x.note for x in labels],
            "user": [user] * len(labels),
            "at": [when] * len(labels),
        },
        schema=LABEL_SCHEMA,
    )
    sink = io.BytesIO()
    pq.write_table(table, sink)
    # The time first, so that names sort in writing order; a random tail, so that two writers never collide.
    name = f"labels-{when.strftime('%Y%m%dT%H%M%S%fZ')}-{uuid.uuid4().hex[:12]}.parquet"
    folder = safe_paths.mkdir(root, root / LABELS_DIR)
    path = folder / name
    safe_paths.write_atomic(root, path, sink.getvalue())
    return path


def read_labels(run_dir: str | Path) -> pa.Table:
    """Every label ever saved beside the run, oldest first (an empty table when there are none)."""
    root = Path(run_dir)
    folder = safe_paths.check(root, root / LABELS_DIR)
    files = sorted(folder.glob("labels-*.parquet")) if folder.is_dir() else []
    if not files:
        return LABEL_SCHEMA.empty_table()
    tables = [pq.read_table(safe_paths.check(root, f), schema=LABEL_SCHEMA) for f in files]
    return pa.concat_tables(tables).sort_by([("at", "ascending")])


def latest_labels(run_dir: str | Path) -> pa.Table:
    """Each person's newest label of each pair (a later label replaces an earlier one of the same person)."""
    rows = read_labels(run_dir).to_pylist()
    newest: dict[tuple[str, str], dict[str, object]] = {}
    for row in rows:  # oldest first: a later row wins
        newest[(str(row["pair_id"]), str(row["user"]))] = row
    return pa.Table.from_pylist(list(newest.values()), schema=LABEL_SCHEMA)
