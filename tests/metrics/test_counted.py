"""The per-conversation sums DuckDB computes over verdicts give the numbers the per-pair rows path gives, for every
estimand, interval method and grouping (random runs, fixed seeds)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import Phase, given, seed, settings
from hypothesis import strategies as st

from delta_eval.metrics.counted import counted, counted_rows, counted_with_total
from delta_eval.metrics.decision import DecisionRule, decide
from delta_eval.metrics.estimand import Estimand
from delta_eval.metrics.paired import non_inferiority, sign_test
from delta_eval.metrics.strata import by_stratum
from delta_eval.metrics.winrate import win_rate, win_rates_by

OUTCOMES = ["candidate", "baseline", "tie", "equivalent", "error"]
ERRORS = [None, "baseline replay failed: 500", "candidate replay failed: timeout",
          "baseline replay failed; candidate replay failed", "judge answer malformed"]  # fmt: skip


@st.composite
def runs(draw: Any) -> list[dict[str, Any]]:
    """Verdict rows of a random run: clustered conversations in strata, ties, errors of each side, preferences,
    varying weights or not, a few rows without a conversation."""
    n = draw(st.integers(0, 60))
    conversations = draw(st.integers(1, 12))
    vary = draw(st.booleans())
    rows = []
    for i in range(n):
        c = draw(st.integers(0, conversations - 1))
        outcome = draw(st.sampled_from(OUTCOMES))
        error = draw(st.sampled_from(ERRORS)) if outcome == "error" else None
        side = draw(st.sampled_from([None, "baseline", "candidate", "both", "judge"])) if error else None
        rows.append({
            "pair_id": f"p{i}",
            "outcome": outcome,
            "preference": draw(st.one_of(st.none(), st.floats(0, 1))) if outcome in OUTCOMES[:3] else None,
            "weight": float(1 + c % 3) if vary else 1.0,
            "conversation_id": None if draw(st.integers(0, 20)) == 0 else f"c{c}",
            "stratum": f"s{c % 3}",
            "error": error,
            "error_side": side,
            "stage": "judge" if outcome in OUTCOMES[:3] else "deterministic",
        })  # fmt: skip
    return rows


def _close(x: Any, y: Any) -> None:
    if isinstance(x, float) and isinstance(y, float):
        assert (math.isinf(x) and x == y) or math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-9), (x, y)
    elif isinstance(x, dict):
        assert x.keys() == y.keys()
        for k in x:
            _close(x[k], y[k])
    elif isinstance(x, list | tuple):
        assert len(x) == len(y)
        for a, b in zip(x, y, strict=True):
            _close(a, b)
    else:
        assert x == y, (x, y)


ESTIMANDS = st.builds(
    Estimand,
    over=st.sampled_from(["all", "judged"]),
    soft=st.booleans(),
    weighted=st.sampled_from([True, False, "auto"]),
    errors=st.sampled_from(["loss", "exclude"]),
)


@seed(20)
@settings(max_examples=150, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(runs(), ESTIMANDS, st.sampled_from(["cluster", "bootstrap", "wilson", "iid"]))
def test_win_rate_in_duckdb_is_the_rows_win_rate(rows: list[dict[str, Any]], e: Estimand, method: Any) -> None:
    options = {**e.model_dump(), "method": method, "resamples": 200, "seed": 3}
    _close(win_rate(pa.Table.from_pylist(rows), **options).model_dump(), win_rate(rows, **options).model_dump())
    by = {**e.model_dump(), "method": method, "resamples": 200}
    if method == "bootstrap" and any(r["conversation_id"] is None for r in rows):
        return  # a pair without a conversation is named by its position in its group there: the draws differ
    _close([w.model_dump() for w in win_rates_by(pa.Table.from_pylist(rows), **by)],
           [w.model_dump() for w in win_rates_by(rows, **by)])  # fmt: skip


@seed(21)
@settings(max_examples=100, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(runs(), ESTIMANDS)
def test_sums_in_duckdb_are_the_rows_sums(rows: list[dict[str, Any]], e: Estimand) -> None:
    table = pa.Table.from_pylist(rows, schema=pa.schema([
        ("pair_id", pa.string()), ("outcome", pa.string()), ("preference", pa.float64()), ("weight", pa.float64()),
        ("conversation_id", pa.string()), ("stratum", pa.string()), ("error", pa.string()),
        ("error_side", pa.string()), ("stage", pa.string())]))  # fmt: skip
    # By stratum, a pair without a conversation is named by its position in its group in the rows path.
    by = "stratum" if all(r["conversation_id"] for r in rows) else None
    sql, mine = counted(table, e, by=by), counted_rows(rows, e, by=by)
    assert sql.keys() == mine.keys()
    for g in sql:
        x, y = sql[g], mine[g]
        assert x.clusters.tolist() == y.clusters.tolist()
        assert (x.counts, x.error_losses, x.weighted, x.pairs, x.none_won) == (
            y.counts, y.error_losses, y.weighted, y.pairs, y.none_won)  # fmt: skip
        for name in ("a", "ta", "b", "tb", "iid"):
            np.testing.assert_allclose(getattr(x.sums, name), getattr(y.sums, name), rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(x.sums.seen, y.sums.seen)
        np.testing.assert_array_equal(x.sums.strata, y.sums.strata)
        np.testing.assert_allclose(x.balance, y.balance, atol=1e-12)


@seed(22)
@settings(max_examples=30, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(runs(), st.sampled_from(["all", "judged"]), st.sampled_from([0.0, 0.02, 0.1]))
def test_decision_in_duckdb_is_the_rows_decision(rows: list[dict[str, Any]], over: Any, margin: float) -> None:
    table = pa.Table.from_pylist(rows)
    _close(
        non_inferiority(table, margin, over=over).model_dump(), non_inferiority(rows, margin, over=over).model_dump()
    )
    _close(sign_test(table, over=over).model_dump(), sign_test(rows, over=over).model_dump())
    _close([s.model_dump() for s in by_stratum(table, margin, over=over)],
           [s.model_dump() for s in by_stratum(rows, margin, over=over)])  # fmt: skip
    rule = DecisionRule(margin=margin, over=over)
    _close(decide(table, rule=rule).model_dump(), decide(rows, rule=rule).model_dump())


@seed(24)
@settings(max_examples=60, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(runs(), ESTIMANDS)
def test_the_total_from_the_grouped_pass_is_the_total_of_its_own(rows: list[dict[str, Any]], e: Estimand) -> None:
    table = pa.Table.from_pylist(rows) if rows else pa.table({"outcome": pa.array([], pa.string())})
    total, groups = counted_with_total(table, e, by="stratum")
    alone, by = counted(table, e)[""], counted(table, e, by="stratum")
    assert groups.keys() == by.keys()
    assert total.clusters.tolist() == alone.clusters.tolist()
    assert (total.counts, total.error_losses, total.weighted, total.pairs) == (
        alone.counts, alone.error_losses, alone.weighted, alone.pairs)  # fmt: skip
    # The same doubles, to the last bit (a conversation's stratum in two groups, which these runs never draw, is
    # the explicit test below).
    for name in ("a", "ta", "b", "tb", "iid"):
        np.testing.assert_array_equal(getattr(total.sums, name), getattr(alone.sums, name))
    np.testing.assert_array_equal(total.sums.seen, alone.sums.seen)
    np.testing.assert_array_equal(total.sums.strata, alone.sums.strata)
    np.testing.assert_array_equal(total.balance, alone.balance)


@pytest.mark.parametrize(("weights", "varies"), [
    ([2.0, 2.0, None], True),  # a missing weight is 1: they vary
    ([1.0, 0.0, None], False),  # a zero or missing weight is 1: they do not
    ([0.5, 0.5, 0.5], False),
])  # fmt: skip
def test_whether_weights_vary_is_read_as_every_estimate_reads_weights(weights: list[Any], varies: bool) -> None:
    import duckdb

    from delta_eval.metrics.counted import weights_vary_sql
    from delta_eval.metrics.estimand import weights_vary

    db = duckdb.connect()
    db.register("v", pa.table({"weight": pa.array(weights, pa.float64())}))
    assert weights_vary_sql(db, "v") is varies
    assert weights_vary([w or 1.0 for w in weights]) is varies  # the rows path's reading


def test_shared_sums_query_a_table_once_and_only_within_the_block() -> None:
    """Within ``shared_sums`` a second count of the same table reads the first one's sums (here: the rows changed
    in between, and the count does not see it), whatever name the null group is given; outside it, every count
    reads the table."""
    import duckdb

    from delta_eval.metrics.counted import shared_sums

    con = duckdb.connect()
    con.execute(
        "CREATE TABLE v (outcome VARCHAR, conversation_id VARCHAR, stratum VARCHAR, pair_id VARCHAR, error VARCHAR)"
    )
    con.execute("INSERT INTO v VALUES ('candidate', 'a', NULL, 'p1', NULL), ('baseline', 'b', 's', 'p2', NULL)")
    with shared_sums():
        first = counted("v", by="stratum", null="", con=con)
        con.execute("INSERT INTO v VALUES ('candidate', 'c', 's', 'p3', NULL)")
        again = counted("v", by="stratum", null="None", con=con)
    assert sorted(first) == ["", "s"]
    assert sorted(again) == ["None", "s"]
    assert again["s"].pairs == first["s"].pairs == 1
    assert counted("v", by="stratum", null="None", con=con)["s"].pairs == 2


def test_shared_sums_split_the_rows_into_groups_once_whatever_a_null_group_is_named() -> None:
    """Within ``shared_sums`` the second count of the same table and grouping gets the first one's groups (the
    summary's win rates and the decision's), its null group, where there is one, under the name asked for."""
    import duckdb

    from delta_eval.metrics.counted import counted_with_total, shared_sums

    con = duckdb.connect()
    con.execute(
        "CREATE TABLE v (outcome VARCHAR, conversation_id VARCHAR, stratum VARCHAR, pair_id VARCHAR, error VARCHAR)"
    )
    con.execute("INSERT INTO v VALUES ('candidate', 'a', 't', 'p1', NULL), ('baseline', 'b', 's', 'p2', NULL)")
    with shared_sums():
        total, first = counted_with_total("v", by="stratum", null="", con=con)
        again_total, again = counted_with_total("v", by="stratum", null="None", con=con)
        assert again_total is total
        assert again.keys() == first.keys() == {"s", "t"}
        assert all(again[g] is first[g] for g in first)
    con.execute("UPDATE v SET stratum = NULL WHERE pair_id = 'p1'")
    with shared_sums():
        _, named = counted_with_total("v", by="stratum", null="", con=con)
        _, renamed = counted_with_total("v", by="stratum", null="None", con=con)
    assert named.keys() == {"", "s"}
    assert renamed.keys() == {"None", "s"}
    assert named[""].pairs == renamed["None"].pairs == 1


def test_the_decision_counts_a_run_view_by_its_name() -> None:
    """A table with every column the win rate reads, typed as the decision's view types it, is counted by its own
    name (so the summary's win rates and the decision's are the same sums); one typed otherwise, through the view."""
    import duckdb

    from delta_eval.metrics.decision_sql import Source

    con = duckdb.connect()
    typed = pa.table({"outcome": ["tie"], "preference": pa.array([None], pa.float64()), "weight": [1.0],
                      "conversation_id": ["c"], "stratum": ["s"], "error_side": pa.array([None], pa.string()),
                      "error": pa.array([None], pa.string()), "stage": ["judge"], "pair_id": ["p"]})  # fmt: skip
    con.register("typed", typed)
    con.register("untyped", typed.set_column(2, "weight", pa.array([1], pa.int64())))
    for name, expected in (("typed", "typed"), ("untyped", None)):
        src = Source(con, name, None)
        try:
            assert src.counted_verdicts == (expected or src.verdicts)
        finally:
            src.close()


def test_a_conversation_found_in_two_strata_is_one_cluster_as_on_rows() -> None:
    """A conversation whose verdicts name two strata is one conversation of the total (its sums added, in the
    order of its first stratum), as the rows path counts it; by stratum, one in each."""
    rows = [{"pair_id": f"p{i}", "outcome": o, "conversation_id": c, "stratum": s, "weight": 1.0 + i % 2}
            for i, (o, c, s) in enumerate([("candidate", "a", "s2"), ("baseline", "a", "s1"), ("tie", "b", "s1"),
                                           ("candidate", "c", "s2"), ("baseline", "a", "s2")])]  # fmt: skip
    for e in (Estimand(), Estimand(weighted=True), Estimand(soft=True)):
        total, groups = counted_with_total(pa.Table.from_pylist(rows), e, by="stratum")
        for sql, mine in ((total, counted_rows(rows, e)[""]), *((groups[g], counted_rows(rows, e, by="stratum")[g])
                                                                for g in ("s1", "s2"))):  # fmt: skip
            assert sql.clusters.tolist() == mine.clusters.tolist()
            assert sql.sums.strata.tolist() == mine.sums.strata.tolist()
            for name in ("a", "ta", "b", "tb", "seen", "iid"):
                np.testing.assert_allclose(getattr(sql.sums, name), getattr(mine.sums, name))
            assert sql.pairs == mine.pairs
        assert total.clusters.tolist() == ["a", "b", "c"]


@pytest.mark.parametrize("e", [Estimand(weighted=True), Estimand(soft=True, weighted=True)])
def test_a_conversation_in_two_groups_is_weighed_over_both_in_the_total(e: Estimand) -> None:
    """Conversation a has one verdict under a null stratum and five under an empty one (two groups by stratum, one
    stratum of the total): its weighted sums in the total are those of its six verdicts, to the last bit, as over
    every row alone (0.1 * 6), not each group's added (0.1 * 1 + 0.1 * 5 is another double)."""
    rows = [{"pair_id": f"p{i}", "outcome": "candidate", "conversation_id": "a", "stratum": None if i == 0 else "",
             "weight": 0.1} for i in range(6)]  # fmt: skip
    rows.append({"pair_id": "q", "outcome": "baseline", "conversation_id": "b", "stratum": "s", "weight": 1.0})
    table = pa.Table.from_pylist(rows)
    total, _ = counted_with_total(table, e, by="stratum")
    alone = counted(table, e)[""]
    assert 0.1 * 1 + 0.1 * 5 != 0.1 * 6  # (what the example rests on)
    for name in ("a", "ta", "b", "tb", "iid"):
        np.testing.assert_array_equal(getattr(total.sums, name), getattr(alone.sums, name))
    np.testing.assert_array_equal(total.balance, alone.balance)
