"""Several runs side by side (the same source, other candidates or other days): their decisions, and the pairs
whose outcome differs between them.

Runs of the same source share pair ids (``conversation#turn``), so the pairs are matched by id. Each run's outcomes
are copied into one DuckDB table, ``outcomes`` (a column per run), and the differing pairs are a paginated query
over it.

Example::

    comparison = Comparison([RunView("runs/monday"), RunView("runs/tuesday")])
    page = comparison.differences(page=1)
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from delta_eval.metrics.frames import to_arrow
from delta_eval.viewer.queries import PAGE_SIZE, RunView

__all__ = ["Comparison", "Differences"]


@dataclass(frozen=True)
class Differences:
    """A page of the pairs whose outcome differs between runs: ``rows`` hold ``pair_id`` and one outcome per run
    (``None`` where a run has no such pair); ``pairs`` counts every pair of any run."""

    rows: list[dict[str, Any]]
    total: int
    pairs: int
    page: int
    pages: int


class Comparison:
    """The pairs of several runs, matched by pair id."""

    def __init__(self, runs: Sequence[RunView]) -> None:
        import duckdb

        self.runs = list(runs)
        self._con = duckdb.connect()
        self._lock = threading.Lock()
        for i, run in enumerate(self.runs):
            with run.cursor() as cur:
                table = to_arrow(cur.sql("SELECT pair_id, outcome FROM pair_index"))
            self._con.register(f"_run{i}", pa.table({"pair_id": table["pair_id"], f"o{i}": table["outcome"]}))
        if not self.runs:
            self._con.execute("CREATE TABLE outcomes (pair_id VARCHAR)")
            return
        # FULL JOIN on pair_id: a pair one run has and another lacks is a difference too.
        joined = "_run0"
        select = "SELECT pair_id, o0"
        for i in range(1, len(self.runs)):
            joined += f" FULL JOIN _run{i} USING (pair_id)"
            select += f", o{i}"
        self._con.execute(f"CREATE TABLE outcomes AS {select} FROM {joined}")
        outcomes = [f"o{i}" for i in range(len(self.runs))]
        # the same outcome in every run, a missing pair counting as its own value
        same = " AND ".join(f"{o} IS NOT DISTINCT FROM o0" for o in outcomes[1:]) or "TRUE"
        self._con.execute(
            f"ALTER TABLE outcomes ADD COLUMN differs BOOLEAN; UPDATE outcomes SET differs = NOT ({same})"
        )

    def differences(self, page: int = 1, size: int = PAGE_SIZE) -> Differences:
        """The page ``page`` of the pairs whose outcome differs, by pair id."""
        with self._lock:
            cur = self._con.cursor()
        try:
            # fetchall, not fetchone: a result left half-read keeps the connection busy for the next statement
            ((differ, every),) = cur.execute(
                "SELECT count(*) FILTER (WHERE differs), count(*) FROM outcomes"
            ).fetchall()
            total, pairs = int(differ or 0), int(every or 0)
            pages = max(1, -(-total // size))
            page = min(max(page, 1), pages)
            rel = cur.execute(
                "SELECT * EXCLUDE (differs) FROM outcomes WHERE differs ORDER BY pair_id LIMIT ? OFFSET ?",
                [size, (page - 1) * size],
            )
            columns = [d[0] for d in rel.description]
            rows = [dict(zip(columns, r, strict=True)) for r in rel.fetchall()]
        finally:
            cur.close()
        return Differences(rows=rows, total=total, pairs=pairs, page=page, pages=pages)
