"""Several runs side by side: the same candidate across days or sources, or other candidates on the same source.
Per run its decision, win rate, cost and latency; the pairs whose outcome differs between the runs; and, for runs of
the same candidate, how consistent they are (the share of runs approved, and how often their outcomes agree).

Runs of the same source and sample share pair ids (``conversation#turn``, ``@epoch`` with epochs), so pairs are
matched by id (:class:`PairOutcomes`, which the viewer's ``/compare`` page uses too): a pair one run has and another
lacks counts as a difference, since the runs did not decide the same thing about it.

Example::

    c = de.analyze(["runs/monday", "runs/tuesday"])
    c.summary()             # each run's decision, win rate, cost and latency; counts; consistency per candidate
    c.differences(limit=20) # the first pairs whose outcome differs, with each run's outcome
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, overload

import pyarrow as pa

from delta_eval.analysis.analyze import Analysis
from delta_eval.duckdb_connect import connect
from delta_eval.metrics.frames import to_arrow
from delta_eval.metrics.intervals import wilson_interval
from delta_eval.result import RunResult

__all__ = ["Comparison", "PairOutcomes", "analyze", "candidate_key"]


class PairOutcomes:
    """The outcomes of several runs' pairs, matched by pair id, in one in-memory DuckDB table ``outcomes``
    (``pair_id``, then ``o0``, ``o1``, ... one column per run, ``NULL`` where a run lacks the pair, and ``differs``).

    ``tables`` hold each run's ``pair_id`` and ``outcome`` (an Arrow table, one row per pair). Safe to query from
    several threads (the viewer serves pages concurrently): each query takes its own cursor.

    Example:
        >>> import pyarrow as pa
        >>> po = PairOutcomes([pa.table({"pair_id": ["a#1", "b#1"], "outcome": ["tie", "candidate"]}),
        ...                    pa.table({"pair_id": ["a#1", "c#1"], "outcome": ["tie", "baseline"]})])
        >>> po.counts()
        (2, 3)
        >>> [(r["pair_id"], r["o0"], r["o1"]) for r in po.differing(10)]
        [('b#1', 'candidate', None), ('c#1', None, 'baseline')]
        >>> po.agreement([0, 1])
        (1, 1)
    """

    def __init__(self, tables: Sequence[pa.Table]) -> None:
        self.runs = len(tables)
        self._con = connect()
        self._lock = threading.Lock()
        for i, table in enumerate(tables):
            self._con.register(f"_run{i}", pa.table({"pair_id": table["pair_id"], f"o{i}": table["outcome"]}))
        if not tables:
            self._con.execute("CREATE TABLE outcomes (pair_id VARCHAR, differs BOOLEAN)")
            return
        # FULL JOIN on pair_id: a pair one run has and another lacks is a difference too.
        joined = "_run0" + "".join(f" FULL JOIN _run{i} USING (pair_id)" for i in range(1, self.runs))
        columns = ", ".join(f"o{i}" for i in range(self.runs))
        # the same outcome in every run, a missing pair counting as its own value
        same = " AND ".join(f"o{i} IS NOT DISTINCT FROM o0" for i in range(1, self.runs)) or "TRUE"
        self._con.execute(f"CREATE TABLE outcomes AS SELECT pair_id, {columns}, NOT ({same}) AS differs FROM {joined}")
        for i in range(self.runs):
            self._con.unregister(f"_run{i}")  # copied into the table: the caller's Arrow data can go

    def _query(self, sql: str, params: list[Any] | None = None) -> tuple[list[str], list[tuple[Any, ...]]]:
        with self._lock:
            cur = self._con.cursor()
        try:
            # fetchall, never fetchone: a result left half-read keeps the connection busy for the next statement
            rel = cur.execute(sql, params or [])
            return [d[0] for d in rel.description], rel.fetchall()
        finally:
            cur.close()

    def counts(self) -> tuple[int, int]:
        """How many pairs differ, and how many pairs any run has."""
        _, ((differ, every),) = self._query("SELECT count(*) FILTER (WHERE differs), count(*) FROM outcomes")
        return int(differ or 0), int(every or 0)

    def differing(self, limit: int, offset: int = 0) -> list[dict[str, Any]]:
        """The pairs whose outcome differs, by pair id, from ``offset``: ``pair_id`` and ``o0``, ``o1``, ..."""
        columns, rows = self._query(
            "SELECT * EXCLUDE (differs) FROM outcomes WHERE differs ORDER BY pair_id LIMIT ? OFFSET ?", [limit, offset]
        )
        return [dict(zip(columns, r, strict=True)) for r in rows]

    def agreement(self, runs: Sequence[int]) -> tuple[int, int]:
        """Over the pairs every run of ``runs`` (indices) has: how many, and on how many they all give the same
        outcome."""
        if not runs:
            return 0, 0
        first, *rest = (f"o{int(i)}" for i in runs)
        shared = " AND ".join(f"o{int(i)} IS NOT NULL" for i in runs)
        same = " AND ".join(f"{o} = {first}" for o in rest) or "TRUE"
        _, ((n, agree),) = self._query(f"SELECT count(*), count(*) FILTER (WHERE {same}) FROM outcomes WHERE {shared}")
        return int(n or 0), int(agree or 0)


def candidate_key(result: RunResult) -> str:
    """What makes two runs' candidates the same candidate: the candidate's part of the run's fingerprint (model,
    system prompt, rendering, provider options and set parameters), without its display name, since renaming a
    candidate does not change what was replayed.

    Example::

        same = candidate_key(de.open_result("runs/monday")) == candidate_key(de.open_result("runs/tuesday"))
    """
    m = result.manifest
    part = m.fingerprint.get("candidate")
    if not isinstance(part, dict):  # a folder written before the fingerprint kept the sides: its typed fields
        return json.dumps({"model": m.candidate_model, "describe": m.candidate})
    return json.dumps({k: v for k, v in part.items() if k != "name"}, sort_keys=True, default=str)


def _analyses(run: str | Path | RunResult | Analysis) -> list[Analysis]:
    """The analyses a run stands for: itself, or each of its candidates when a folder holds several."""
    if isinstance(run, Analysis):
        return [run]
    result = run if isinstance(run, RunResult) else RunResult(run)
    if result.candidates and not isinstance(run, RunResult):
        return [Analysis(result.of(c)) for c in result.candidates]
    return [Analysis(result)]


def point_outcomes(table: pa.Table, candidate: str | None) -> pa.Table:
    """A run's ``pair_id``/``outcome`` rows keyed by the turn: a candidate's pair ids of a run of several end with
    ``~name``, taken off so that its pairs meet the same turns of the other candidates and of other runs.

    Example:
        >>> t = pa.table({"pair_id": ["c#1~warm", "c#2~warm"], "outcome": ["tie", "baseline"]})
        >>> point_outcomes(t, "warm")["pair_id"].to_pylist()
        ['c#1', 'c#2']
    """
    if candidate is None:
        return table
    suffix = f"~{candidate}"
    ids = [p[: -len(suffix)] if p.endswith(suffix) else p for p in table["pair_id"].to_pylist()]
    return pa.table({"pair_id": pa.array(ids, pa.string()), "outcome": table["outcome"]})


def _names(paths: Sequence[Path]) -> list[str]:
    """Short names for the runs: each folder's name, or its whole path where two folders share a name."""
    short = [p.name or str(p) for p in paths]
    return [s if short.count(s) == 1 else str(p) for s, p in zip(short, paths, strict=True)]


class Comparison:
    """Several run folders side by side (see the module docstring); built by ``de.analyze([run, run, ...])``.

    Every method returns JSON-ready data. The runs' outcomes are matched once, when the comparison is made; the
    per-run figures come from each run's :class:`~delta_eval.analysis.analyze.Analysis` (cached in its folder).
    """

    def __init__(self, runs: Sequence[str | Path | RunResult | Analysis]) -> None:
        if not runs:
            raise ValueError("a comparison needs at least one run folder")
        # a folder of several candidates is one run per candidate, side by side
        self.analyses = [a for r in runs for a in _analyses(r)]
        folders = list(dict.fromkeys(a.path for a in self.analyses))  # a folder of several candidates: once
        short = dict(zip(folders, _names(folders), strict=True))
        self.names = [short[a.path] if a.result.candidate is None else f"{short[a.path]} · {a.result.candidate}"
                      for a in self.analyses]  # fmt: skip
        tables = [point_outcomes(to_arrow(a.con.sql("SELECT pair_id, outcome FROM verdicts")), a.result.candidate)
                  for a in self.analyses]  # fmt: skip
        self.outcomes = PairOutcomes(tables)
        self._runs: list[dict[str, Any]] | None = None

    def runs(self) -> list[dict[str, Any]]:
        """Per run: its name and folder, what was compared (each side's one-line description and model), the
        decision (``outcome``, ``decided_by``), the win rate over all pairs with its 95% interval, the pairs, and
        per side the cost and latency (p50, p90)."""
        if self._runs is not None:
            return self._runs
        out = []
        for name, a in zip(self.names, self.analyses, strict=True):
            m = a.result.manifest
            s = a.summary()  # with the decision: comparing decisions is the point
            out.append({
                "name": name,
                "run": str(a.path),
                "status": m.status,
                "source": m.source,
                "baseline": m.baseline,
                "candidate": m.candidate,
                "baseline_model": m.baseline_model,
                "candidate_model": m.candidate_model,
                "pairs": s["pairs"],
                "decision": {"outcome": s["decision"]["outcome"], "decided_by": s["decision"]["decided_by"]},
                "win_rate": s["win_rate"]["all"],
                "sides": {
                    side: {k: v[k] for k in ("cost_usd", "latency_ms_p50", "latency_ms_p90")}
                    for side, v in s["sides"].items()
                },
            })  # fmt: skip
        self._runs = out
        return out

    def consistency(self) -> list[dict[str, Any]]:
        """For each candidate that two or more runs share (:func:`candidate_key`): which runs, the share of them
        approved with its 95% Wilson interval (the runs counted as independent trials), and, over the pairs every
        one of them has, how many and on how many they all give the same outcome (``None`` when none is shared,
        e.g. runs over other sources)."""
        groups: dict[str, list[int]] = {}
        for i, a in enumerate(self.analyses):
            groups.setdefault(candidate_key(a.result), []).append(i)
        runs = self.runs()
        out = []
        for members in groups.values():
            if len(members) < 2:
                continue
            approved = sum(runs[i]["decision"]["outcome"] == "APPROVED" for i in members)
            share = approved / len(members)
            lo, hi = wilson_interval(share, len(members))
            shared, agree = self.outcomes.agreement(members)
            out.append({
                "candidate": runs[members[0]]["candidate"],
                "candidate_model": runs[members[0]]["candidate_model"],
                "runs": [self.names[i] for i in members],
                "approved": {"count": approved, "of": len(members), "share": round(share, 4), "lo": round(lo, 4),
                             "hi": round(hi, 4)},
                "agreement": {"shared_pairs": shared, "agree": agree,
                              "share": round(agree / shared, 4) if shared else None},
            })  # fmt: skip
        return out

    def differences(self, limit: int = 20, offset: int = 0) -> dict[str, Any]:
        """The pairs whose outcome differs between the runs (by pair id): how many (``total``) of how many pairs
        any run has (``pairs``), and from ``offset`` up to ``limit`` of them, each with its outcome per run
        (``outcomes``, in the order of ``runs``; ``None`` where a run lacks the pair)."""
        total, pairs = self.outcomes.counts()
        rows = self.outcomes.differing(limit, offset)
        keys = [f"o{i}" for i in range(len(self.analyses))]
        return {
            "runs": list(self.names),
            "total": total,
            "pairs": pairs,
            "offset": offset,
            "rows": [{"pair_id": r["pair_id"], "outcomes": [r[k] for k in keys]} for r in rows],
        }

    def summary(self) -> dict[str, Any]:
        """The comparison in one dict: ``runs`` (:meth:`runs`), ``pairs`` (any run's), ``differing`` (their count),
        ``consistency`` (:meth:`consistency`)."""
        total, pairs = self.outcomes.counts()
        return {"runs": self.runs(), "pairs": pairs, "differing": total, "consistency": self.consistency()}


#: What ``analyze`` takes for one run.
Run = str | Path | RunResult


# A str is a Sequence[str] too, which mypy reports as an overlap; the first overload wins for a str, as the runtime
# check below does, so the ignore is the documented way to say so (Sequence rather than list: list is invariant, and a
# list[Path] would not match list[str | Path | RunResult]).
@overload
def analyze(run: Run) -> Analysis: ...  # type: ignore[overload-overlap]


@overload
def analyze(run: Sequence[Run]) -> Comparison: ...


def analyze(run: Run | Sequence[Run]) -> Analysis | Comparison:
    """The :class:`~delta_eval.analysis.analyze.Analysis` of a run folder; given several (a list or tuple),
    their :class:`Comparison`. It lives here rather than beside ``Analysis`` because it builds both: the comparison
    is made of analyses, and the module of ``Analysis`` does not import the comparison back.

    Example::

        de.analyze("runs/demo").summary()                                # one run: Analysis
        de.analyze(["runs/monday", "runs/tuesday"]).differences(limit=10)  # several: Comparison
    """
    # One run first: a path given as a str is a sequence too.
    if isinstance(run, str | Path | RunResult):
        return Analysis(run)
    return Comparison(list(run))
