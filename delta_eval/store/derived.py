"""The derived datasets of a run folder: computed from one dataset's part of each batch as it is written, never
added by hand, and named in the batch's commit record apart from its files.

- ``verdict_tallies`` (:mod:`delta_eval.store.tallies`), from the batch's verdicts: what the win rates read;
- ``replay_tallies`` (:mod:`delta_eval.store.replay_tallies`), from its replays: what the decision's side metrics
  read.

A batch's derived part is always computed from the same rows as the part it derives from: at its commit, and again
whenever a rewrite (a merge, a removal of rows) writes a new part. A reader uses a derived dataset only when every
batch with the dataset it derives from has its part (:func:`complete`); else it reads the rows.

Example:
    >>> record = {"batch": 3, "files": {"verdicts": ["verdicts/part-000003.parquet"]},
    ...           "sizes": {"verdict_tallies/part-000003.parquet": 120},
    ...           "derived": {"verdict_tallies": ["verdict_tallies/part-000003.parquet"]}}
    >>> derived_parts(record, "verdict_tallies"), complete([record], "verdict_tallies")
    (['verdict_tallies/part-000003.parquet'], True)
    >>> complete([record], "replay_tallies")  # the batch has no replays
    True
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa

from delta_eval.store.replay_tallies import REPLAY_TALLIES, replay_tally, write_replay_tallies
from delta_eval.store.tallies import TALLIES, tally, write_tallies

__all__ = ["DERIVED", "DERIVED_FROM", "complete", "derive", "derived_parts", "write_derived"]

#: Each derived dataset, and the dataset it is computed from.
DERIVED_FROM: dict[str, str] = {TALLIES: "verdicts", REPLAY_TALLIES: "replays"}
_OF_ROWS: dict[str, Callable[[pa.Table], pa.Table]] = {TALLIES: tally, REPLAY_TALLIES: replay_tally}
_OF_PART: dict[str, Callable[[Path, Path], int]] = {TALLIES: write_tallies, REPLAY_TALLIES: write_replay_tallies}

#: The field of a commit record that names its derived parts, apart from its ``files``: a version of the library
#: from before them reads and checks ``files`` only, so it neither fetches nor checks them (a batch of a folder it
#: reads is never damaged by them), and its rewrites write none, which readers then see (see :func:`derived_parts`).
DERIVED = "derived"


def derive(tables: Mapping[str, pa.Table]) -> dict[str, pa.Table]:
    """The derived datasets of a batch of ``tables`` (by dataset name), from the rows they derive from."""
    return {name: _OF_ROWS[name](tables[source]) for name, source in DERIVED_FROM.items() if source in tables}


def write_derived(name: str, part: Path, dest: Path) -> int:
    """Write derived dataset ``name`` of the part file ``part`` (of the dataset it derives from) to ``dest``;
    returns its rows (0: ``dest`` is not created)."""
    return _OF_PART[name](part, dest)


def derived_parts(record: Mapping[str, Any], name: str) -> list[str]:
    """The part files of derived dataset ``name`` a commit record names, where they are the batch's own: named for
    its number (a record an older version rewrote copies its old batch's fields, derived parts of other rows among
    them) and with a recorded size."""
    derived = record.get(DERIVED)
    rels = derived.get(name) if isinstance(derived, dict) else None
    batch = record.get("batch")
    own = f"{name}/part-{batch:06d}.parquet" if isinstance(batch, int) else None
    sizes = record.get("sizes") or {}
    if own is None or not isinstance(rels, list) or rels != [own] or own not in sizes:
        return []
    return [own]


def complete(records: Iterable[Mapping[str, Any]], name: str) -> bool:
    """Whether the committed batches ``records`` (their commit records) have derived dataset ``name`` wherever they
    have the dataset it derives from: then, and only then, it covers every row of that dataset."""
    source = DERIVED_FROM[name]
    return all(bool(derived_parts(r, name)) for r in records if (r.get("files") or {}).get(source))
