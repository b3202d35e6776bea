"""What each replayed turn adds to its side's sums per conversation, in SQL over a replay row: the one definition of
the counts the decision's side metrics read (:mod:`delta_eval.metrics.decision_sql`), whether it sums them over
every replay or over the sums each batch stored of its own replays (:mod:`delta_eval.store.replay_tallies`).

Every value is an integer (a count of turns, of tool calls, or their products), so sums of them are the same
whatever rows they are summed from, and in whatever order; only a conversation's cost is a sum of doubles (see
:data:`COST`).

Example:
    >>> import duckdb
    >>> db = duckdb.connect()
    >>> _ = db.execute("CREATE TABLE r AS SELECT 'candidate' AS side, NULL::VARCHAR AS error, 2 AS n_tool_calls, "
    ...                "1 AS invalid_tool_calls, true AS matches_recorded")
    >>> db.execute(f"SELECT {turn_sums()['inv']}, {turn_sums()['s_valid']} FROM r").fetchall()
    [(1, 1)]
"""

from __future__ import annotations

__all__ = ["COST", "COUNTS", "REPLAYED", "turn_sums"]

#: A replayed turn (of either side, not a recorded one) that did not fail.
REPLAYED = "side IS DISTINCT FROM 'recorded' AND error IS NULL"
_OK = "error IS NULL"
#: A conversation's cost: its turns' ``cost_usd`` summed compensated (Kahan-Babuska-Neumaier, DuckDB's ``fsum``),
#: so that the order its rows are read in (threads combine partial sums in any order) changes no bit where it
#: matters: a baseline against itself reads a cost ratio of exactly 1.
COST = "fsum(cost_usd)"


def turn_sums(nd: str = f"CASE WHEN {_OK} THEN no_decision END", acted: str = "coalesce(recorded_acted, false)"
              ) -> dict[str, str]:  # fmt: skip
    """Per column name, what one replay row adds to its side's sums per conversation (an integer): ``n`` (the
    turn), ``fails`` (an error), ``m`` (matched the recorded turn, without an error), ``nd_n`` and ``nd_a`` (the
    no-decision rate's unit and event: ``nd`` is the turn's "no decision", null where unknown), ``unpriced`` (no
    cost), ``inv`` and ``calls`` (its invalid and all tool calls, none on a failed turn), ``s_inv``, ``s_valid``,
    ``s_calls`` (whether it made an invalid call, a valid one, any), ``t_n`` and ``t_a`` (the text-instead-of-action
    rate's unit and event: ``acted`` is whether production acted at that point) and ``ii``, ``ic``, ``cc`` (the
    products of its invalid calls and calls, for the as-if-independent variance)."""
    inv = f"CASE WHEN {_OK} THEN coalesce(invalid_tool_calls, 0) ELSE 0 END"
    calls = f"CASE WHEN {_OK} THEN coalesce(n_tool_calls, 0) ELSE 0 END"
    return {
        "n": "1",
        "fails": "(error IS NOT NULL)::BIGINT",
        "m": f"({_OK} AND coalesce(matches_recorded, false))::BIGINT",
        "nd_n": f"(({nd}) IS NOT NULL)::BIGINT",
        "nd_a": f"coalesce({nd}, false)::BIGINT",
        "unpriced": "(cost_usd IS NULL)::BIGINT",
        "inv": inv,
        "calls": calls,
        # (Written out, not read from the names above: a column of the source of the same name would be read.)
        "s_inv": f"({inv} > 0)::BIGINT",
        "s_valid": f"({calls} - {inv} > 0)::BIGINT",
        "s_calls": f"({calls} > 0)::BIGINT",
        "t_n": f"coalesce({_OK} AND {acted}, false)::BIGINT",
        "t_a": f"coalesce({_OK} AND {acted} AND text_instead_of_action, false)::BIGINT",
        "ii": f"({inv}) * ({inv})",
        "ic": f"({inv}) * ({calls})",
        "cc": f"({calls}) * ({calls})",
    }


#: What the decision counts of the replays before reading them (see
#: :meth:`~delta_eval.metrics.decision_sql.Source.replay_counts`), per row: summed, but for ``most_calls`` and
#: ``least_calls`` (the most and least tool calls, valid or invalid, of a replayed turn that did not fail; null on
#: other rows), whose largest and smallest are taken. ``unkeyed`` and ``recorded`` are counted by the rows' keys.
COUNTS = {
    "undecided": f"({REPLAYED} AND no_decision IS NULL)::BIGINT",
    "unacted": f"({REPLAYED} AND recorded_acted IS NULL)::BIGINT",
    "unpaired": "(coalesce(side IN ('candidate', 'baseline'), false) AND pair_key IS NULL)::BIGINT",
    "most_calls": f"CASE WHEN {REPLAYED} THEN greatest(n_tool_calls, invalid_tool_calls) END",
    "least_calls": f"CASE WHEN {REPLAYED} THEN least(n_tool_calls, invalid_tool_calls) END",
}
