"""The win rate per stratum over a run's conversation keys (see delta_eval.store.conversation_key): the same sums,
intervals and counts as over the conversations' ids, with every row keyed, none, or some (a folder resumed across
the version that added the keys), and the ids' text left unread where every counted row has a key."""

from __future__ import annotations

from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, seed, settings
from hypothesis import strategies as st

from delta_eval.metrics.counted import counted, counted_with_total
from delta_eval.metrics.difference import StratumSums
from delta_eval.metrics.estimand import Estimand
from delta_eval.metrics.winrate import win_rate_of
from delta_eval.store.conversation_key import conversation_key
from tests.metrics.test_counted import runs

SCHEMA = pa.schema([("pair_id", pa.string()), ("outcome", pa.string()), ("preference", pa.float64()),
                    ("weight", pa.float64()), ("conversation_id", pa.string()), ("stratum", pa.string()),
                    ("error", pa.string()), ("error_side", pa.string()), ("stage", pa.string()),
                    ("conversation_key", pa.int64())])  # fmt: skip


def _table(rows: list[dict[str, Any]], keyed: str) -> pa.Table:
    """The rows with their conversations' keys: every row's (``all``), none (``none``) or every other row's."""
    out = []
    for i, r in enumerate(rows):
        key = conversation_key(r["conversation_id"]) if keyed == "all" or (keyed == "some" and i % 2) else None
        out.append({**r, "conversation_key": key})
    return pa.Table.from_pylist(out, schema=SCHEMA)


def _sums(con: Any, view: str, e: Estimand, by: str | None) -> tuple[Any, ...]:
    total: dict[str, Any] = {}
    groups = counted(view, e, by=by, null="None", con=con, per_conversation=False, total=total if by else None)
    return groups, total


def _same(x: Any, y: Any) -> None:
    """Two Counted alike to the last bit (and their win rates)."""
    assert isinstance(x.sums, StratumSums)
    assert isinstance(y.sums, StratumSums)
    for name in ("strata", "clusters", "sums", "squares", "seen", "units", "iid"):
        np.testing.assert_array_equal(np.asarray(getattr(x.sums, name)), np.asarray(getattr(y.sums, name)))
    assert (x.sums.rates, x.sums.pairs, x.counts, x.error_losses, x.signs) == (
        y.sums.rates, y.sums.pairs, y.counts, y.error_losses, y.signs)  # fmt: skip
    e = Estimand()
    assert win_rate_of(x, e).model_dump() == win_rate_of(y, e).model_dump()


@seed(30)
@settings(max_examples=80, deadline=None)
@given(runs(), st.sampled_from(["all", "some", "none"]), st.sampled_from(["all", "judged"]),
       st.sampled_from(["loss", "exclude"]), st.sampled_from([None, "stratum"]))  # fmt: skip
def test_sums_over_keys_are_the_sums_over_ids(rows: list[dict[str, Any]], keyed: str, over: Any, errors: Any,
                                              by: str | None) -> None:  # fmt: skip
    e = Estimand(over=over, errors=errors, weighted=False)
    with duckdb.connect() as con:
        con.register("keyed", _table(rows, keyed))
        con.execute("CREATE VIEW named AS SELECT * EXCLUDE (conversation_key) FROM keyed")
        (mine, mine_total), (theirs, their_total) = _sums(con, "keyed", e, by), _sums(con, "named", e, by)
    assert mine.keys() == theirs.keys()
    assert mine_total.keys() == their_total.keys()
    for g in mine:
        _same(mine[g], theirs[g])
    for g in mine_total:
        _same(mine_total[g], their_total[g])


def _unreadable_ids(con: Any, rows: list[dict[str, Any]]) -> None:
    """A view ``v`` of keyed rows whose ``conversation_id`` fails the query that reads it."""
    con.register("t", _table(rows, "all"))
    con.execute("CREATE VIEW v AS SELECT * EXCLUDE (conversation_id), "
                "CASE WHEN pair_id IS NOT NULL THEN error('conversation_id read') END::VARCHAR AS conversation_id "
                "FROM t")  # fmt: skip


def test_the_win_rate_per_stratum_reads_the_keys_not_the_ids() -> None:
    rows = [{"pair_id": f"p{i}", "outcome": o, "conversation_id": f"c{i % 3}", "stratum": f"s{i % 2}",
             "weight": 1.0, "preference": None, "error": None, "error_side": None, "stage": "judge"}
            for i, o in enumerate(["candidate", "baseline", "tie", "equivalent", "candidate", "baseline"])]  # fmt: skip
    with duckdb.connect() as con:
        _unreadable_ids(con, rows)
        got = counted("v", Estimand(), con=con, per_conversation=False)[""]
        total, groups = counted_with_total("v", Estimand(), by="stratum", con=con, per_conversation=False)
        assert got.pairs == total.pairs == 6
        assert sorted(groups) == ["s0", "s1"]
        # the sums per conversation name each conversation: the ids are read
        with pytest.raises(duckdb.Error, match="conversation_id read"):
            counted("v", Estimand(), con=con, per_conversation=True)
    plain = counted(pa.Table.from_pylist(rows), Estimand(), per_conversation=False)[""]
    _same(got, plain)
