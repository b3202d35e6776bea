"""An estimand's counted pairs, summed per conversation: what every interval, test and decision on the win rate
reads, whether a query engine computed the sums over a million verdicts or they were added up from rows in memory.

:func:`counted` runs one pass of DuckDB over the verdicts (an Arrow table, a DuckDB relation or DataFrame, or the
``verdicts`` view of a run's connection) with the estimand written in SQL
(:func:`~delta_eval.metrics.estimand.sql_contribution`), so no pair becomes a Python object;
:meth:`~delta_eval.metrics.estimand.Components.counted` gives the same sums from rows already in memory (a property
test holds the two to the same numbers). With ``per_conversation=False`` DuckDB adds the conversations up per
stratum too (hard outcomes, unweighted), so one row per stratum reaches Python
(:class:`~delta_eval.metrics.difference.StratumSums`: what the win rate, the decision and the summary read; the row
per conversation is for weighted or soft sums and the cluster bootstrap, which resamples conversations).

Example:
    >>> import pyarrow as pa
    >>> table = pa.table({"outcome": ["candidate", "tie", "baseline"], "conversation_id": ["a", "a", "b"]})
    >>> c = counted(table)[""]
    >>> c.pairs, c.clusters.tolist(), c.counts["tie"]
    (3, ['a', 'b'], 1)
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from delta_eval.duckdb_connect import connect
from delta_eval.metrics.difference import PRODUCTS, PairedSums, StratumSums, exact_residuals
from delta_eval.metrics.estimand import (
    VERDICT_COLUMNS,
    Components,
    Estimand,
    components,
    sql_contribution,
    sql_error_side,
)
from delta_eval.metrics.frames import Rows, fetch_table, rows_of, to_arrow
from delta_eval.metrics.text_order import text_order

__all__ = [
    "BALANCED",
    "OUTCOMES",
    "Counted",
    "counted",
    "counted_of",
    "counted_rows",
    "counted_with_total",
    "shared_memo",
    "shared_sums",
    "weights_vary_sql",
]

#: The outcomes every count names, even at 0.
OUTCOMES = ("candidate", "baseline", "tie", "equivalent", "error")
#: A conversation whose pairs add up to within this of 0 is in balance (the sign test leaves it out).
BALANCED = 1e-12


@dataclass(frozen=True)
class Counted:
    """The counted pairs of an estimand, one row per conversation: ``sums`` (weighted when ``weighted``), the
    conversation of each row (``clusters``, sorted by stratum then name), each conversation's unweighted
    ``sum(a - b)`` (``balance``, for the sign test); and over all the rows, the count of every outcome and of the
    error pairs counted as a loss of each side.

    Or, from :func:`counted` with ``per_conversation=False``, one row per stratum: ``sums`` are
    :class:`~delta_eval.metrics.difference.StratumSums`, ``clusters`` and ``balance`` are ``None`` and ``signs``
    holds what the sign test reads (see :meth:`sign_counts`)."""

    sums: PairedSums | StratumSums
    clusters: np.ndarray | None
    balance: np.ndarray | None
    counts: dict[str, int] = field(default_factory=dict)
    error_losses: dict[str, int] = field(default_factory=dict)
    weighted: bool = False
    signs: tuple[int, int, int] | None = None

    @property
    def pairs(self) -> int:
        """How many pairs count."""
        return self.sums.pairs

    @property
    def none_won(self) -> bool:
        """Some pairs count and none was won by either side (every one a tie or equivalent)."""
        return self.pairs > 0 and not self.sums.seen[0].any() and not self.sums.seen[2].any()

    def sign_counts(self) -> tuple[int, int, int]:
        """The conversations whose pairs favour the candidate on balance, those favouring the baseline, and those
        in balance."""
        if self.balance is None:
            return self.signs or (0, 0, 0)
        plus, minus = int((self.balance > BALANCED).sum()), int((self.balance < -BALANCED).sum())
        return plus, minus, len(self.balance) - plus - minus

    def bootstrap_sums(self) -> tuple[np.ndarray, np.ndarray]:
        """Per conversation, ``sum(w score)`` and ``sum(w)``: what the cluster bootstrap resamples."""
        s = self.sums
        if not isinstance(s, PairedSums):
            raise ValueError("the cluster bootstrap needs per-conversation sums: counted(..., per_conversation=True)")
        return 0.5 * s.ta + (s.a - s.b) / 2, s.ta


# Per conversation (and group), the sums PairedSums reads; a row without a conversation is its own (named by its
# position, as Components names it). A conversation's stratum is the largest it has (one, in a sampled run). The
# rows with a conversation are grouped by it as it is and the (rare) rows without one apart, by their name (a
# name computed for every row cost a quarter of the query); the rows are sorted in numpy, which is faster than an
# ORDER BY here. Grouped by stratum too (``{st}`` is ``st``, ``{keys}`` ``, st``), and the (rare) conversation
# found in two strata merged in numpy: cheaper than a min and a max of strings per conversation; for the sums per
# stratum (_STRATA), which have no conversation to merge in numpy, ``max(st) AS st`` per conversation.
_ROWS = """
WITH rows AS (
    SELECT {group} AS grp, conversation_id::VARCHAR AS conv, _row, pair_id,
           coalesce(stratum::VARCHAR, '') AS st, {a} AS a, {b} AS b,
           {w} AS w
    FROM (SELECT *, CASE WHEN outcome = 'error' THEN {side} END AS _side FROM src) WHERE {counted}
)"""
_GROUPED = """
    SELECT grp, conv AS cl, {st}, count(*) AS n, {sums} FROM rows WHERE conv <> '' GROUP BY grp, conv{keys}
    UNION ALL
    SELECT grp, '#' || coalesce(_row::VARCHAR, pair_id) AS cl, {st}, count(*) AS n, {sums}
    FROM rows WHERE conv IS NULL OR conv = '' GROUP BY grp, cl{keys}
"""
# The same over the conversations' keys (every counted row has one, see counted): grouped on a number, not on
# the id's text (which also goes unread).
_ROWS_KEYED = """
WITH rows AS (
    SELECT {group} AS grp, conversation_key AS conv, coalesce(stratum::VARCHAR, '') AS st, {a} AS a, {b} AS b,
           {w} AS w
    FROM (SELECT *, CASE WHEN outcome = 'error' THEN {side} END AS _side FROM src) WHERE {counted}
)"""
_GROUPED_KEYED = """
    SELECT grp, conv AS cl, {st}, count(*) AS n, {sums} FROM rows GROUP BY grp, conv{keys}
"""
# Sums of weights and preferences are compensated (fsum): a conversation's rows reach them in any order (threads
# over a run's row groups), and plain sums of them differed in their last bits from one call to the next.
_CLUSTERS = _ROWS + _GROUPED.replace(
    "{sums}",
    """fsum(w * a) AS wa, fsum(w) AS wt, fsum(w * b) AS wb, fsum(a - b) AS balance,
       bool_or(a > 0) AS a_seen, bool_or(a < 1) AS a_not, bool_or(b > 0) AS b_seen, bool_or(b < 1) AS b_not,
       fsum(w * w * a * a) AS aa, fsum(w * w * a) AS "at", fsum(w * w) AS tt,
       fsum(w * w * b * b) AS bb, fsum(w * w * b) AS bt, fsum(w * w * a * b) AS ab""",
)

# The same for hard outcomes (``a`` and ``b`` are 0 or 1, never both): every product is one of a few sums, and
# whether a win (or a non-win) occurred follows from the counts, so the query adds up 3 values per row (weighted:
# then 6 products per conversation and weight) instead of 14 (each aggregate over a million rows costs about as
# much as grouping them).
_HARD_SELECT = """)
SELECT grp, cl, st, n, wa, wt, wb, ua - ub AS balance,
       ua > 0 AS a_seen, ua < n AS a_not, ub > 0 AS b_seen, ub < n AS b_not,
       w2a AS aa, w2a AS "at", tt, w2b AS bb, w2b AS bt, 0.0::DOUBLE AS ab
FROM sums
"""
_CLUSTERS_HARD = {
    False: _ROWS + ", sums AS (" + _GROUPED.replace(
        "{sums}", "sum(a) AS ua, sum(b) AS ub, ua AS wa, ub AS wb, n::DOUBLE AS wt, ua AS w2a, wt AS tt, ub AS w2b"
    ) + _HARD_SELECT,
    # Weighted: a conversation's pairs counted per weight first (whole numbers, exact), then each count multiplied
    # by its weight once. A conversation has one weight (its stratum's), so each weighted sum is one product,
    # rounded once: the same double whatever order its rows are read in, and whether they are read from the
    # verdicts or from their tallies (delta_eval.metrics.tallied).
    True: _ROWS + ", cells AS (" + _GROUPED.replace("{st}", "st, w").replace("{keys}", ", st, w").replace(
        "{sums}", "sum(a) AS ua, sum(b) AS ub"
    ) + """), sums AS (
    SELECT grp, cl, st, sum(n) AS n, sum(ua) AS ua, sum(ub) AS ub, fsum(w * ua) AS wa, fsum(w * ub) AS wb,
           fsum(w * n) AS wt, fsum(w * w * ua) AS w2a, fsum(w * w * n) AS tt, fsum(w * w * ub) AS w2b
    FROM cells GROUP BY grp, cl, st""" + _HARD_SELECT,
}  # fmt: skip

# The count of each outcome, and of the error pairs counted as a loss of each side, per group: the rows grouped
# first by what decides whether they count (the outcome, and an error's side), which is then decided once per
# group (``{counted}`` and ``{side}`` read the grouped rows' ``error_side``), not once per row (which cost as much as
# the sums per stratum).
_COUNTS = """
WITH kinds AS (
    SELECT {group} AS grp, outcome, CASE WHEN outcome = 'error' THEN {side} END AS error_side,
           NULL::VARCHAR AS error, count(*) AS n{inner}
    FROM src GROUP BY ALL
)
SELECT grp, coalesce(outcome, 'None') AS outcome, CASE WHEN {counted} AND outcome = 'error' THEN error_side END AS lost,
       sum(n)::BIGINT AS n{outer}
FROM kinds GROUP BY grp, outcome, lost
"""
# In the same pass, the range of the counted rows' weights, for weighted="auto" (see weights_vary_sql).
_SPREAD = (
    ", max({w}) AS w_hi, min({w}) AS w_lo",
    ", max(w_hi) FILTER (WHERE {counted}) AS w_hi, min(w_lo) FILTER (WHERE {counted}) AS w_lo",
)

# Per stratum (hard outcomes, unweighted: see counted), the sums per conversation (and group) of a query as
# above (each conversation in the largest stratum it has, as the rows path puts it) added up, over each group and,
# for the total, over every row (``whole``, each conversation's rows of every group added up): what StratumSums
# reads. Each conversation's sums are counts (``t`` pairs, ``ua`` and ``ub`` of them won by each side), and so are
# the sums of them and of their products (exact as DOUBLE below 2**53, in any order): _exact_residuals expands the
# residuals' squares from those in exact arithmetic, the same to the last bit whatever order DuckDB added them in
# (float residuals would not be). Every conversation has units (a pair at least), so every one counts in the
# interval; the sign test reads each one's balance, ``ua - ub``. The last SELECT names the sums as _stratum_counted
# reads them (several are one: with hard outcomes and a unit per pair, ``sum(w w a) = sum(a)``, ...).
_LEVEL_SELECT = """)
SELECT grp, cl, st, n::DOUBLE AS t, ua, ub FROM sums"""
_LEVEL = {keyed: rows + ", sums AS (" + grouped.replace("{sums}", "sum(a) AS ua, sum(b) AS ub") + _LEVEL_SELECT
          for keyed, rows, grouped in ((False, _ROWS, _GROUPED), (True, _ROWS_KEYED, _GROUPED_KEYED))}  # fmt: skip
_MERGED = {
    False: "SELECT 0 AS whole, * FROM clusters",
    True: """SELECT 0 AS whole, * FROM clusters
    UNION ALL
    SELECT 1 AS whole, NULL AS grp, cl, max(st) AS st, sum(t) AS t, sum(ua) AS ua, sum(ub) AS ub
    FROM clusters GROUP BY cl""",
}
_STRATA = """
WITH clusters AS ({clusters}),
merged AS ({merged}),
per AS (
    SELECT whole, grp, st, count(*) AS conversations, sum(t) AS t, sum(ua) AS a, sum(ub) AS b,
           count_if(ua > 0) AS s0, count_if(ua < t) AS s1, count_if(ub > 0) AS s2, count_if(ub < t) AS s3,
           count_if(ua - ub > {tie}) AS plus, count_if(ua - ub < -{tie}) AS minus,
           sum(ua * ua) AS q_aa, sum(ua * t) AS q_at, sum(t * t) AS q_tt, sum(ub * ub) AS q_bb, sum(ub * t) AS q_bt,
           sum(ua * ub) AS q_ab, count_if(cl IS NULL) AS nokey
    FROM merged GROUP BY whole, grp, st
)
SELECT whole, grp, st, conversations AS m, t AS n, conversations, s0, s1, s2, s3, plus, minus,
       a AS aa, a AS "at", t AS tt, b AS bb, b AS bt, 0.0::DOUBLE AS ab, t AS units, a AS a_all, b AS b_all,
       a AS s_a, t AS s_t, b AS s_b, q_aa, q_at, q_tt, q_bb, q_bt, q_ab, nokey
FROM per
""".replace("{tie}", repr(BALANCED))


def _weight(has_weight: bool) -> str:
    # A missing or zero weight is 1, as the rows path reads ``weight or 1.0``.
    return (
        "CASE WHEN weight IS NULL OR weight = 0 THEN 1.0::DOUBLE ELSE weight::DOUBLE END"
        if has_weight
        else "1.0::DOUBLE"
    )


def weights_vary_sql(db: Any, source: str, where: str = "true", *, has_weight: bool = True) -> bool:
    """Whether the sampling weights of the rows of ``source`` (a table or view of ``db``) that ``where`` keeps
    differ, read as every estimate reads them (a missing or zero weight is 1): what ``weighted="auto"`` settles on."""
    spread = db.execute(f"SELECT max({_weight(has_weight)}), min({_weight(has_weight)}) FROM {source} "
                        f"WHERE {where}").fetchone()  # fmt: skip
    hi, lo = (spread or (None, None))[:2]
    return _vary(hi, lo)


def _vary(hi: float | None, lo: float | None) -> bool:
    """Whether weights from ``lo`` to ``hi`` (``None``: no row) differ beyond rounding."""
    return hi is not None and lo is not None and hi - lo > 1e-9 * max(abs(hi), 1.0)


def counted(verdicts: Rows, estimand: Estimand | None = None, *, by: str | None = None, null: str = "",
            con: Any = None, total: dict[str, Counted] | None = None,
            per_conversation: bool = True) -> dict[str, Counted]:  # fmt: skip
    """The counted pairs of ``verdicts`` under ``estimand`` (default: :class:`Estimand`'s defaults), by the value of
    the ``by`` column (``str`` of it, ``null`` for null; every row under ``""`` without ``by``). ``weighted="auto"``
    is settled once, on all the counted rows, so every group answers the same question.

    ``verdicts`` is an Arrow table, a DuckDB relation or DataFrame, or, with ``con``, the name of a table or view
    in that DuckDB connection (a run's ``verdicts`` view: read straight from its Parquet files). ``total``, when
    given, receives the counted pairs over every row under ``""`` (see :func:`counted_with_total`).

    ``per_conversation=False``: for hard outcomes unweighted, DuckDB adds the conversations up per stratum too, and
    each :class:`Counted` holds :class:`~delta_eval.metrics.difference.StratumSums` (the same intervals and sign
    test, a row per stratum reaching Python) instead of a row per conversation (what only the cluster bootstrap
    needs). Weighted or soft sums stay per conversation: added up in a fixed order, they are the same to the last
    bit whatever order the rows are stored in."""
    e = estimand or Estimand()
    if isinstance(verdicts, str):
        if con is None:
            raise ValueError(f"a table name ({verdicts!r}) needs the DuckDB connection it is in")
        db = con
        names = {str(row[0]) for row in db.execute(f"DESCRIBE {verdicts}").fetchall()}
        # A row without a conversation is named by its pair there (a view's row order is not its position), unless
        # the view keeps its rows' positions (``_row``, as the decision's views of a registered table do).
        row = "" if "_row" in names else ", NULL::BIGINT AS _row"
        db.execute(f"CREATE OR REPLACE TEMP VIEW src AS SELECT *{row} FROM {verdicts}")
    else:
        table = to_arrow(verdicts)
        wanted = dict.fromkeys([*VERDICT_COLUMNS, *([by] if by else [])])
        table = table.select([c for c in wanted if c in table.column_names])
        if by and by not in table.column_names:
            table = table.append_column(by, pa.nulls(table.num_rows, pa.string()))
        table = table.append_column("_row", pa.array(np.arange(table.num_rows, dtype=np.int64)))
        names = set(table.column_names)
        db = connect()
        db.register("src", _with_columns(table))
    memo = _SHARED.get() if isinstance(verdicts, str) else None

    def run(sql: str, fetch: Any) -> Any:
        """The rows of ``sql``, fetched once within :func:`shared_sums`."""
        key = (id(db), verdicts, sql)
        if memo is not None and key in memo:
            return memo[key][1]
        got = fetch(sql)
        if memo is not None:
            memo[key] = (db, got)  # the connection kept alive: its id names no other meanwhile
        return got

    try:
        # A null group is named in Python, so the queries are the same whatever its name (and shared, see
        # shared_sums).
        group = f"{by}::VARCHAR" if by else "''"
        a, b, where = sql_contribution(e, has_error_side="error_side" in names)
        side = sql_error_side(has_error_side="error_side" in names)
        # An error's side is read once per row, as the column _side (written out in each expression that reads it,
        # DuckDB took longer to plan the queries than to run them over 200,000 rows).
        a, b, where = (x.replace(side, "_side") for x in (a, b, where))
        # The counts, and for weighted="auto" the spread of the weights, in one pass.
        auto = e.weighted == "auto"
        extras = [_SPREAD] if auto else []
        # Over the grouped rows, whose error_side is every error's side (read from the text where the folder has
        # no such column).
        grouped = sql_contribution(e, has_error_side=True)[2].replace(sql_error_side(has_error_side=True), "error_side")
        inner = "".join(x[0].format(w=_weight("weight" in names)) for x in extras)
        outer = "".join(x[1].format(counted=grouped) for x in extras)
        counts = run(_COUNTS.format(group=group, side=side, counted=grouped, inner=inner, outer=outer),
                     lambda sql: fetch_table(db, sql).to_pydict())  # fmt: skip
        counts_rows = list(zip(*(counts[c] for c in ("grp", "outcome", "lost", "n")), strict=True))
        if by and not per_conversation and {None, null} <= {g for g, *_ in counts_rows}:
            # The null group named as a real one: the two are one group, whose sums per stratum the query (taking
            # each group's rates) cannot give; added up per conversation, as the rows path does.
            per_conversation = True
        if auto:
            weighted = _vary(max((x for x in counts["w_hi"] if x is not None), default=None),
                             min((x for x in counts["w_lo"] if x is not None), default=None))  # fmt: skip
        else:
            weighted = bool(e.weighted)
        w = _weight("weight" in names) if weighted else "1.0::DOUBLE"
        if weighted or e.soft:
            # Sums of weights or preferences over a stratum's conversations vary in their last bits with the order
            # DuckDB adds them in (a resumed run's files are in another order than a fresh run's): per
            # conversation, numpy adds them in a fixed order, and the same run gives the same figures.
            per_conversation = True
        clusters = _CLUSTERS_HARD[weighted] if not e.soft else _CLUSTERS
        whole: pa.Table | None = None  # the cluster query over every row, where the total needs its own
        if per_conversation:
            sql = clusters.format(group=group, a=a, b=b, w=w, counted=where, side=side, st="st", keys=", st")
            cols = run(sql, lambda sql: fetch_table(db, sql))
            if total is not None and by and (weighted or e.soft) and _spans_groups(cols):
                # A conversation's stratum in two groups (two candidates; a null and an empty stratum): its total
                # weighs its rows of every group together, as over every row alone (counted(by=None)); each group's
                # weighted sums added up would differ in their last bits, or with the order of the groups.
                whole_sql = clusters.format(group="''", a=a, b=b, w=w, counted=where, side=side, st="st",
                                            keys=", st")  # fmt: skip
                whole = run(whole_sql, lambda sql: fetch_table(db, sql))
        else:
            # Hard outcomes, unweighted (else per_conversation, above). The conversations grouped on their keys;
            # where a counted row has none (a folder written before verdicts had keys, or a row without a
            # conversation), on the ids' text instead. Two conversations whose ids share a key would be summed as
            # one: see delta_eval.store.conversation_key.
            for keyed in [True, False] if "conversation_key" in names else [False]:
                level = _LEVEL[keyed].format(group=group, a=a, b=b, w=w, counted=where, side=side,
                                             st="max(st) AS st", keys="")  # fmt: skip
                sql = _STRATA.format(clusters=level, merged=_MERGED[total is not None])
                cols = run(sql, lambda sql: fetch_table(db, sql))
                if not keyed or not any(cols.column("nokey").to_pylist()):
                    break
    finally:
        if not isinstance(verdicts, str):
            db.close()
        else:
            db.execute("DROP VIEW src")
    # The sums of each group, and over every row, computed once for the queries' rows (within shared_sums): the
    # name of a null group matters only where there is one.
    named = null if by and any(g is None for g, *_ in counts_rows) else None
    if per_conversation:
        done = run(f"-- split {named!r} {total is not None} {whole is not None}\n{sql}",
                   lambda _: _groups(cols, counts_rows, by, null, weighted, total is not None, whole))  # fmt: skip
    else:
        done = _strata_groups(cols, counts_rows, by, null, weighted, total is not None)
    out, everything = done
    if total is not None:
        total.update(everything)
    return dict(out)


def _spans_groups(cols: pa.Table) -> bool:
    """Whether a conversation's stratum is in two groups among the cluster query's rows (a conversation in two
    strata of two groups is not: each of its cells is summed alike over every row)."""
    cells = cols.group_by(["cl", "st"]).aggregate([]).num_rows
    return bool(cols.group_by(["grp", "cl", "st"]).aggregate([]).num_rows > cells)


def _groups(cols: pa.Table, counts_rows: list[Any], by: str | None, null: str, weighted: bool, total: bool,
            whole: pa.Table | None = None) -> tuple[dict[str, Counted], dict[str, Counted]]:  # fmt: skip
    """The :class:`Counted` of each group of the queries' rows and, when ``total``, over every row (``""``): from
    ``whole``, the cluster query's rows over every row, where given."""
    if by:
        cols = cols.set_column(cols.schema.get_field_index("grp"), "grp", pc.fill_null(cols.column("grp"), null))
        counts_rows = [(null if g is None else g, *rest) for g, *rest in counts_rows]
    groups = sorted({str(g) for g, *_ in counts_rows} | ({""} if not by else set()))
    out = _split(cols, counts_rows, groups, weighted)
    if not total:
        return out, {}
    # Over every row: the groups' rows of each conversation added up, the counts of every group summed.
    over = whole if whole is not None else cols
    everything = over.set_column(over.schema.get_field_index("grp"), "grp", pa.repeat("", over.num_rows))
    return out, _split(everything, [("", *rest) for _, *rest in counts_rows], [""], weighted)


_SHARED: ContextVar[dict[tuple[Any, ...], Any] | None] = ContextVar("delta_eval_shared_sums", default=None)


@contextmanager
def shared_sums() -> Iterator[None]:
    """Within the block, :func:`counted` over a table or view named in a DuckDB connection runs each of its queries
    once: a second call with the same table, estimand and grouping reads the sums the first one fetched (the
    caller vouches that the table does not change meanwhile, as a run's views do not: the summary and the decision
    it includes read the same sums). So does :func:`~delta_eval.metrics.tallied.tallied_or_counted` over the same
    tallies (see :func:`shared_memo`)."""
    token = _SHARED.set({})
    try:
        yield
    finally:
        _SHARED.reset(token)


def shared_memo() -> dict[tuple[Any, ...], Any] | None:
    """The memo of the enclosing :func:`shared_sums` block (``None`` outside one): for another module's sums that
    are read alike twice within it (:mod:`delta_eval.metrics.tallied`)."""
    return _SHARED.get()


def counted_with_total(verdicts: Rows, estimand: Estimand | None = None, *, by: str, null: str = "", con: Any = None,
                       per_conversation: bool = True) -> tuple[Counted, dict[str, Counted]]:  # fmt: skip
    """:func:`counted` over all the rows and by the value of ``by``, from one pass of DuckDB over the verdicts (the
    decision and the summary read both)."""
    total: dict[str, Counted] = {}
    groups = counted(verdicts, estimand, by=by, null=null, con=con, total=total, per_conversation=per_conversation)
    return total[""], groups


def _strata_groups(cols: pa.Table, counts_rows: list[Any], by: str | None, null: str, weighted: bool, total: bool
                   ) -> tuple[dict[str, Counted], dict[str, Counted]]:  # fmt: skip
    """:func:`_groups` from the rows of the query per stratum (:data:`_STRATA`): each group's :class:`Counted` with
    :class:`~delta_eval.metrics.difference.StratumSums`, and over every row (``""``) when ``total``."""
    data = cols.to_pydict()
    rows = list(zip(*data.values(), strict=True)) if data else []
    index = {name: k for k, name in enumerate(data)}
    named = [(null if g is None else g, *rest) for g, *rest in counts_rows] if by else counts_rows
    mine: dict[tuple[int, str | None], list[tuple[Any, ...]]] = {}  # (over every row, the group's value): its rows
    for r in rows:
        mine.setdefault((int(r[index["whole"]]), r[index["grp"]]), []).append(r)
    out: dict[str, Counted] = {}
    for g in sorted({str(g) for g, *_ in named} | ({""} if not by else set())):
        raw = None if by and g == null and any(x is None for x, *_ in counts_rows) else g
        out[g] = _stratum_counted(mine.get((0, raw), []), index, *_counts(named, g), weighted)
    if not total:
        return out, {}
    counts, losses = _counts([("", *rest) for _, *rest in counts_rows], "")
    return out, {"": _stratum_counted(mine.get((1, None), []), index, counts, losses, weighted)}


def _counts(counts_rows: list[Any], g: str) -> tuple[dict[str, int], dict[str, int]]:
    """The count of every outcome of group ``g``, and of its error pairs counted as a loss of each side."""
    counts = dict.fromkeys(OUTCOMES, 0)
    losses = {"candidate": 0, "baseline": 0, "both": 0}
    for name, outcome, lost, n in counts_rows:
        if name == g:
            counts[str(outcome)] = counts.get(str(outcome), 0) + int(n)
            if lost is not None:
                losses[str(lost)] = losses.get(str(lost), 0) + int(n)
    return counts, losses


def _stratum_counted(rows: list[tuple[Any, ...]], index: dict[str, int], counts: dict[str, int],
                     losses: dict[str, int], weighted: bool) -> Counted:  # fmt: skip
    """One group's :class:`Counted` from its rows of the query per stratum (one per stratum; each holds the
    group's rates and units)."""
    rows = sorted(rows, key=lambda r: str(r[index["st"]]))  # a fixed order: the same sums whatever the query's

    def col(name: str) -> np.ndarray:
        return np.array([float(r[index[name]] or 0.0) for r in rows], dtype=float)

    # One unit per pair on both sides (t_a = t_b = t): each product of the iid totals is one of the query's six.
    short = {"a": "a", "ta": "t", "b": "b", "tb": "t"}
    product = ["".join(sorted(short[p] + short[q])) for p, q in PRODUCTS]
    k = len(rows)
    m = col("m").astype(np.int64)
    # Exact sums: the rates from them, as the per-conversation path divides them.
    units = float(col("units").sum())
    ra, rb = (float(col(c).sum()) / units if units > 0 else 0.0 for c in ("a_all", "b_all"))
    residuals = [_exact_residuals(r, index, ra, rb, int(size)) for r, size in zip(rows, m, strict=True)]
    sums_of, squares_of = np.array([x[:2] for x in residuals]).T, np.array([x[2:] for x in residuals]).T
    sums = StratumSums(
        strata=np.asarray([str(r[index["st"]]) for r in rows], dtype=str),
        clusters=m,
        sums=sums_of.reshape(2, k),
        squares=squares_of.reshape(3, k),
        seen=np.vstack([col(f"s{j}") for j in range(4)]).reshape(4, k),
        rates=(ra, rb),
        units=(units, units),
        pairs=int(col("n").sum()),
        iid=np.array([float(col(name).sum()) for name in product]),
    )
    plus, minus, every = (int(col(c).sum()) for c in ("plus", "minus", "conversations"))
    return Counted(sums, None, None, counts, losses, weighted, (plus, minus, every - plus - minus))


def _exact_residuals(row: tuple[Any, ...], index: dict[str, int], ra: float, rb: float, m: int) -> list[float]:
    """A stratum's sums of the residuals ``u = a - A t`` and ``v = b - B t`` and their squares and product about
    their means, from its exact sums of ``a``, ``t``, ``b`` and of their products (``_STRATA``, one unit a pair on
    both sides): :func:`~delta_eval.metrics.difference.exact_residuals`."""
    x = {name: float(row[index[name]] or 0.0) for name in ("s_a", "s_t", "s_b", "q_aa", "q_at", "q_tt", "q_bb", "q_bt",
                                                             "q_ab")}  # fmt: skip
    totals = [x["s_a"], x["s_t"], x["s_b"], x["s_t"], x["q_aa"], x["q_at"], x["q_tt"], x["q_bb"], x["q_bt"],
              x["q_tt"], x["q_ab"], x["q_at"], x["q_bt"], x["q_tt"]]  # fmt: skip
    return list(exact_residuals(totals, ra, rb, m))


def _split(cols: pa.Table, counts_rows: list[Any], groups: list[str], weighted: bool) -> dict[str, Counted]:
    """The rows of the cluster query (per group, conversation and stratum) and of the counts query as the
    :class:`Counted` of each group."""
    merged = _per_conversation(cols)
    # By group, then first stratum, then name (by their UTF-8 bytes: Python's order); each column put in that
    # order as a numpy array, the text ones as numpy strings.
    order = text_order([merged.column(c) for c in ("grp", "first_st", "cl")])
    data = {name: np.asarray(merged.column(name).to_numpy(zero_copy_only=False))[order]
            for name in merged.column_names if name not in ("grp", "cl", "st", "first_st")}  # fmt: skip
    for name in ("grp", "cl", "st"):
        data[name] = np.asarray(merged.column(name).take(order).to_numpy(zero_copy_only=False), dtype=str)
    grp = data["grp"]
    out: dict[str, Counted] = {}
    for g in groups:
        counts, losses = _counts(counts_rows, g)
        lo, hi = np.searchsorted(grp, g, side="left"), np.searchsorted(grp, g, side="right")
        out[g] = _counted(data, slice(int(lo), int(hi)), counts, losses, weighted)
    return out


def _per_conversation(cols: pa.Table) -> pa.Table:
    """Rows per (group, conversation, stratum) merged into one per (group, conversation): its sums added, its
    stratum the largest (``st``) and the first (``first_st``) it has."""
    n = cols.num_rows
    # One stratum per conversation (a sampled run): nothing to merge, and no sort (the caller sorts once).
    key = cols.column("cl")
    if pc.count_distinct(cols.column("grp")).as_py() > 1:
        key = pc.binary_join_element_wise(cols.column("grp"), key, "\x00")  # distinct keys: distinct pairs
    if pc.count_distinct(key).as_py() == n:
        return cols.append_column("first_st", cols.column("st"))
    cols = cols.take(text_order([cols.column(c) for c in ("grp", "cl", "st")]))
    grp, cl, st = (cols.column(c).combine_chunks() for c in ("grp", "cl", "st"))
    new = np.ones(n, dtype=bool)
    if n > 1:
        same = pc.and_(pc.equal(grp[1:], grp[:-1]), pc.equal(cl[1:], cl[:-1]))
        new[1:] = ~same.to_numpy(zero_copy_only=False)
    starts = np.flatnonzero(new)
    ends = np.append(starts[1:], n).astype(np.int64) - 1
    out: dict[str, Any] = {"grp": grp.take(starts), "cl": cl.take(starts), "first_st": st.take(starts),
                           "st": st.take(ends)}  # fmt: skip
    for name in cols.column_names:
        if name in out:
            continue
        v = cols.column(name).to_numpy(zero_copy_only=False)
        out[name] = np.logical_or.reduceat(v, starts) if v.dtype == bool else np.add.reduceat(v, starts)
    return pa.table(out)


def _with_columns(table: pa.Table) -> pa.Table:
    """``table`` with every column the SQL reads (null where it has none), so one query serves every input."""
    types = {"outcome": pa.string(), "pair_id": pa.string(), "preference": pa.float64(), "weight": pa.float64(),
             "conversation_id": pa.string(), "stratum": pa.string(), "error": pa.string()}  # fmt: skip
    for name, kind in types.items():
        if name not in table.column_names:
            table = table.append_column(name, pa.nulls(table.num_rows, kind))
    return table


def _counted(cols: dict[str, Any], rows: slice, counts: dict[str, int], losses: dict[str, int],
             weighted: bool) -> Counted:  # fmt: skip
    def pick(name: str, kind: Any = float) -> np.ndarray:
        picked: np.ndarray = np.asarray(cols[name])[rows].astype(kind)
        return picked

    # Added up in an order of their values: the same double however the conversations are listed (by id, by key).
    aa, at, tt, bb, bt, ab = (float(np.sort(pick(c)).sum()) for c in ("aa", "at", "tt", "bb", "bt", "ab"))
    seen = np.vstack([pick(c, bool) for c in ("a_seen", "a_not", "b_seen", "b_not")]).reshape(4, -1)
    t = pick("wt")
    sums = PairedSums.from_clusters(pick("st", str), pick("wa"), t, pick("wb"), t, pairs=int(pick("n", int).sum()),
                                    seen=seen, iid=np.array([aa, at, tt, bb, bt, tt, ab, at, bt, tt]))  # fmt: skip
    return Counted(sums, pick("cl", str), pick("balance"), counts, losses, weighted)


def counted_of(c: Components) -> Counted:
    """The same sums from pairs already in memory (one value per pair, see
    :func:`~delta_eval.metrics.estimand.components`)."""
    # PairedSums.of orders conversations as the SQL does: by their first stratum, then by name.
    names = list(dict.fromkeys(cl for _, cl in sorted(set(zip(c.strata, c.clusters, strict=True)))))
    balance: dict[str, float] = {}
    for a, b, cl in zip(c.a, c.b, c.clusters, strict=True):
        balance[cl] = balance.get(cl, 0.0) + (a - b)
    return Counted(c.sums(), np.asarray(names, dtype=str), np.asarray([balance[n] for n in names], dtype=float),
                   dict(c.counts), dict(c.error_losses), c.weighted)  # fmt: skip


def counted_rows(
    verdicts: Rows,
    estimand: Estimand | None = None,
    *,
    by: str | None = None,
    null: str = "",
    con: Any = None,
    per_conversation: bool = True,
) -> dict[str, Counted]:
    """:func:`counted` for any table of verdicts: in DuckDB for a table, a relation or a DataFrame, or the name of
    a table or view in the DuckDB connection ``con``; from the rows for mappings already in memory (which a query
    engine would first have to convert: their sums are always per conversation, whatever ``per_conversation``)."""
    if isinstance(verdicts, str):
        return counted(verdicts, estimand, by=by, null=null, con=con, per_conversation=per_conversation)
    try:
        table = to_arrow(verdicts)
    except TypeError:
        pass  # rows of mappings
    else:
        return counted(table, estimand, by=by, null=null, per_conversation=per_conversation)
    e = estimand or Estimand()
    rows = rows_of(verdicts)
    if e.weighted == "auto":
        e = e.model_copy(update={"weighted": components(rows, e).weighted})
    if by is None:
        return {"": counted_of(components(rows, e))}
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        value = r.get(by)
        groups.setdefault(null if value is None else str(value), []).append(r)
    return {g: counted_of(components(groups[g], e)) for g in sorted(groups)}
