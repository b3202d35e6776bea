"""The replays of each batch summed by what the decision's side metrics read of them: a derived dataset,
``replay_tallies``, written with every batch that has replays, from those replays (see
:mod:`delta_eval.store.derived`).

A row sums a batch's replays of one side, epoch and conversation (its key): the counts of
:func:`delta_eval.replay_sums.turn_sums` and :data:`delta_eval.replay_sums.COUNTS` (integers) and the conversation's
cost there (its turns' costs summed exactly rounded, :func:`math.fsum`). The decision reads about one row per
conversation and side instead of one per replayed turn (two million replays of 143,000 conversations are 286,000
rows), and every count it takes is a sum of integers, the same whichever rows it is read from. The sides' sums are
read from them where each conversation has one tally row per side (a compacted run of one epoch holds each
conversation's turns in one batch), with that row's cost; where some conversation has several (batches, epochs),
the replays are read (summing rounded costs again could differ in the last bit; see
:func:`delta_eval.metrics.decision_sql._tallied_sums`). The replays' counts and products are read from them
whatever their rows. As with the verdicts' tallies, a batch's are computed from the same rows as its replays part (at
its commit, and again whenever a rewrite writes a new replays part), and a reader uses them only when every batch
with replays has them.

Example:
    >>> import pyarrow as pa
    >>> replays = pa.table({"side": ["candidate", "candidate", "recorded"], "conversation_key": [7, 7, 7],
    ...                     "error": [None, "timeout", None], "cost_usd": [0.5, 0.25, None]})
    >>> t = replay_tally(replays).sort_by("side")
    >>> t.column("side").to_pylist(), t.column("n").to_pylist(), t.column("fails").to_pylist()
    (['candidate', 'recorded'], [2, 1], [1, 0])
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pydantic import BaseModel

from delta_eval.duckdb_connect import connect
from delta_eval.replay_sums import COUNTS, turn_sums
from delta_eval.sql import quote_ident, quote_literal
from delta_eval.store.rows import Table
from delta_eval.store.tallies import _column

__all__ = ["REPLAY_TALLIES", "REPLAY_TALLY_TABLE", "ReplayTally", "replay_tally", "write_replay_tallies"]

#: The dataset's name in a run folder.
REPLAY_TALLIES = "replay_tallies"


class ReplayTally(BaseModel):
    """A batch's replays of one side, epoch and conversation, summed (see the module docstring and
    :func:`delta_eval.replay_sums.turn_sums` for each count)."""

    side: str | None = None
    #: The epoch, a missing or zero one as the first.
    epoch: int
    conversation_key: int | None = None
    n: int
    fails: int
    m: int
    nd_n: int
    nd_a: int
    unpriced: int
    inv: int
    calls: int
    s_inv: int
    s_valid: int
    s_calls: int
    t_n: int
    t_a: int
    ii: int
    ic: int
    cc: int
    undecided: int
    unacted: int
    unpaired: int
    most_calls: int | None = None
    least_calls: int | None = None
    #: The turns' cost summed exactly rounded; null where none is priced.
    cost: float | None = None


REPLAY_TALLY_TABLE: Table[ReplayTally] = Table(ReplayTally)
#: The columns a replay tally groups the replays by.
KEYS = ("side", "epoch", "conversation_key")
#: The replays' columns the sums read, with the type the run's replays give them (null where a part has none: one
#: written before the column existed).
READS = {"side": "VARCHAR", "epoch": "BIGINT", "conversation_key": "BIGINT", "pair_key": "BIGINT",
         "error": "VARCHAR", "cost_usd": "DOUBLE", "n_tool_calls": "BIGINT", "invalid_tool_calls": "BIGINT",
         "matches_recorded": "BOOLEAN", "text_instead_of_action": "BOOLEAN", "no_decision": "BOOLEAN",
         "recorded_acted": "BOOLEAN"}  # fmt: skip


def _query(source: str, columns: set[str]) -> str:
    """The tallies of the replays in the DuckDB table or relation ``source`` (whose columns are ``columns``), each
    group's priced turns' costs listed (``costs``: summed by :func:`_fsum`)."""
    cols = ", ".join(f"{quote_ident(c) if c in columns else 'NULL'}::{t} AS {quote_ident(c)}" for c, t in READS.items())
    sums = {**turn_sums(), **{k: v for k, v in COUNTS.items() if k not in ("most_calls", "least_calls")}}
    aggs = [*(f"sum({sql})::BIGINT AS {name}" for name, sql in sums.items()),
            f"max({COUNTS['most_calls']}) AS most_calls", f"min({COUNTS['least_calls']}) AS least_calls",
            "list(cost_usd) FILTER (cost_usd IS NOT NULL) AS costs"]  # fmt: skip
    return (f"SELECT side, coalesce(nullif(epoch, 0), 1) AS epoch, conversation_key, {', '.join(aggs)} "
            f"FROM (SELECT {cols} FROM {source}) GROUP BY ALL")  # fmt: skip


def _fsum(costs: pa.ChunkedArray | pa.Array) -> pa.Array:
    """Each list of costs summed exactly rounded (:func:`math.fsum`: whatever order the turns are in), null where
    it is empty or null (no turn priced)."""
    return pa.array([_exact_sum(c) if (c := [x for x in each or () if x is not None]) else None
                     for each in costs.to_pylist()], pa.float64())  # fmt: skip


def _exact_sum(values: list[float]) -> float:
    """:func:`math.fsum`, or where it refuses (an infinity of each sign, a sum past the largest double) the plain
    sum, NaN or an infinity, as a compensated sum gives them: a cost that makes no sense is not a batch that cannot
    be written."""
    try:
        return math.fsum(values)
    except (ValueError, OverflowError):
        return sum(values)


def _run(sql: str) -> pa.Table:
    with connect() as db:
        found = db.sql(sql).to_arrow_table()
    found = found.append_column("cost", _fsum(found.column("costs")))
    schema = REPLAY_TALLY_TABLE.schema
    return _in_order(pa.table([found.column(f.name).cast(f.type) for f in schema], schema=schema))


#: The order tallies are written in: by side, then conversation key (the order the decision reads them in, which it
#: then need not sort them into: see ``metrics.decision_sql``), then epoch.
ORDER = (("side", "ascending"), ("conversation_key", "ascending"), ("epoch", "ascending"))


def _in_order(tallies: pa.Table) -> pa.Table:
    return tallies.sort_by(list(ORDER)) if tallies.num_rows > 1 else tallies


#: The Arrow type of each SQL type of :data:`READS`.
_ARROW = {"VARCHAR": pa.string(), "BIGINT": pa.int64(), "DOUBLE": pa.float64(), "BOOLEAN": pa.bool_()}


def _false_if_null(x: pa.Array) -> pa.Array:
    return pc.fill_null(x, False)


def replay_tally(replays: pa.Table) -> pa.Table:
    """The tallies of ``replays`` (a batch's rows, with the replays' columns): one row per side, epoch and
    conversation key, in the order of :data:`ORDER`.

    In Arrow, a batch at a time as the run writes it (a DuckDB query costs tens of milliseconds to start, more than
    the batch's own writing): the same sums as :func:`delta_eval.replay_sums.turn_sums` and
    :data:`~delta_eval.replay_sums.COUNTS` give in SQL, which a merged part's tallies are computed with
    (:func:`write_replay_tallies`; a property test holds the two equal). Each conversation's cost is its turns'
    costs summed exactly rounded (:func:`math.fsum`)."""
    schema = REPLAY_TALLY_TABLE.schema
    if not replays.num_rows:
        return schema.empty_table()
    c = {name: _column(replays, name, _ARROW[kind]) for name, kind in READS.items()}
    size = replays.num_rows
    ok = pc.is_null(c["error"])
    side = c["side"]
    # SQL's `side IS DISTINCT FROM 'recorded'`: a null side is not the recorded one.
    replayed = pc.and_(pc.invert(_false_if_null(pc.equal(side, "recorded"))), ok)
    zero = pa.scalar(0, pa.int64())
    inv = pc.if_else(ok, pc.fill_null(c["invalid_tool_calls"], 0), zero)
    calls = pc.if_else(ok, pc.fill_null(c["n_tool_calls"], 0), zero)
    acted = _false_if_null(c["recorded_acted"])
    flags = {
        "fails": pc.is_valid(c["error"]),
        "m": pc.and_(ok, _false_if_null(c["matches_recorded"])),
        "nd_n": pc.and_(ok, pc.is_valid(c["no_decision"])),
        "nd_a": pc.and_(ok, _false_if_null(c["no_decision"])),
        "unpriced": pc.is_null(c["cost_usd"]),
        "s_inv": pc.greater(inv, 0),
        "s_valid": pc.greater(pc.subtract(calls, inv), 0),
        "s_calls": pc.greater(calls, 0),
        "t_n": pc.and_(ok, acted),
        "t_a": pc.and_(pc.and_(ok, acted), _false_if_null(c["text_instead_of_action"])),
        "undecided": pc.and_(replayed, pc.is_null(c["no_decision"])),
        "unacted": pc.and_(replayed, pc.is_null(c["recorded_acted"])),
        "unpaired": pc.and_(_false_if_null(pc.is_in(side, pa.array(["candidate", "baseline"]))),
                            pc.is_null(c["pair_key"])),
    }  # fmt: skip
    counts = {
        "n": pa.array(np.ones(size, dtype=np.int64)),
        **{name: flag.cast(pa.int64()) for name, flag in flags.items()},
        "inv": inv, "calls": calls,
        "ii": pc.multiply(inv, inv), "ic": pc.multiply(inv, calls), "cc": pc.multiply(calls, calls),
    }  # fmt: skip
    # SQL's greatest and least skip a null argument.
    nulls = pa.nulls(size, pa.int64())
    most = pc.if_else(replayed, pc.max_element_wise(c["n_tool_calls"], c["invalid_tool_calls"]), nulls)
    least = pc.if_else(replayed, pc.min_element_wise(c["n_tool_calls"], c["invalid_tool_calls"]), nulls)
    epoch = pc.if_else(_false_if_null(pc.not_equal(c["epoch"], 0)), c["epoch"], pa.scalar(1, pa.int64()))
    rows = pa.table({"side": side, "epoch": epoch, "conversation_key": c["conversation_key"], **counts,
                     "most_calls": most, "least_calls": least, "cost_usd": c["cost_usd"]})  # fmt: skip
    summed = rows.group_by(list(KEYS), use_threads=False).aggregate(
        [*((name, "sum") for name in counts), ("most_calls", "max"), ("least_calls", "min"), ("cost_usd", "list")]
    )
    columns = {**{k: summed.column(k) for k in KEYS}, **{name: summed.column(f"{name}_sum") for name in counts},
               "most_calls": summed.column("most_calls_max"), "least_calls": summed.column("least_calls_min"),
               "cost": _fsum(summed.column("cost_usd_list"))}  # fmt: skip
    return _in_order(pa.table([columns[f.name].cast(f.type) for f in schema], schema=schema))


def write_replay_tallies(replays: Path, dest: Path) -> int:
    """Write the tallies of the replays part file ``replays`` to ``dest`` (DuckDB reads the file as it sums it: a
    merged part of millions of replays is never in memory whole); returns the tally rows written (0: ``dest`` is not
    created)."""
    columns = set(pq.read_schema(replays).names)
    tallies = _run(_query(f"read_parquet({quote_literal(str(replays))})", columns))
    if tallies.num_rows:
        pq.write_table(tallies, dest, compression="zstd")
    return int(tallies.num_rows)
