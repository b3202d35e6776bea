"""The estimand is one definition: the Python rule and its SQL form count the same pairs the same way, and every
consumer (win rate, decision, planning, stopping) reads it."""

from __future__ import annotations

from typing import Any

import duckdb
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from delta_eval.metrics import decide, win_rate
from delta_eval.metrics.estimand import Estimand, components, contribution, error_side, sql_contribution
from delta_eval.testing.verdicts import simulate_verdicts

ERRORS = [
    ("baseline", "baseline replay failed: 429"),
    ("candidate", "candidate replay failed: 500"),
    ("both", "baseline replay failed: x; candidate replay failed: y"),
    ("judge", "judge openai:j failed: not JSON"),
]

verdict = st.one_of(
    st.builds(
        lambda o, p: {"outcome": o, "preference": p},
        st.sampled_from(["candidate", "baseline", "tie"]),
        st.one_of(st.none(), st.floats(0, 1)),
    ),
    st.just({"outcome": "equivalent", "preference": None}),
    st.builds(
        lambda e, known: {"outcome": "error", "preference": None, "error": e[1], "error_side": e[0] if known else None},
        st.sampled_from(ERRORS),
        st.booleans(),
    ),
)
estimands = st.builds(
    Estimand,
    over=st.sampled_from(["all", "judged"]),
    soft=st.booleans(),
    weighted=st.just(False),
    errors=st.sampled_from(["loss", "exclude"]),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(verdict, min_size=1, max_size=30), estimands)
def test_the_sql_form_counts_the_same_pairs_the_same_way(rows: list[dict[str, Any]], e: Estimand) -> None:
    table = pa.Table.from_pylist(
        [
            {
                "outcome": r["outcome"],
                "preference": r["preference"],
                "error": r.get("error"),
                "error_side": r.get("error_side"),
            }
            for r in rows
        ],
        schema=pa.schema(
            [
                ("outcome", pa.string()),
                ("preference", pa.float64()),
                ("error", pa.string()),
                ("error_side", pa.string()),
            ]
        ),
    )
    a, b, counted = sql_contribution(e)
    con = duckdb.connect()
    con.register("verdicts", table)
    got = con.execute(f"SELECT {a}, {b}, {counted} FROM verdicts").fetchall()
    for row, (sa, sb, sc) in zip(rows, got, strict=True):
        expected = contribution(row, e)
        assert bool(sc) == (expected is not None), (row, e)
        if expected is not None:
            assert (sa, sb) == pytest.approx(expected)


def test_error_sides_are_read_from_the_column_or_from_old_error_texts() -> None:
    for side, text in ERRORS:
        assert error_side({"outcome": "error", "error": text}) == side
        assert error_side({"outcome": "error", "error_side": side, "error": "anything"}) == side
    assert error_side({"outcome": "tie"}) is None


def test_a_failed_replay_is_a_loss_of_the_side_that_failed() -> None:
    rows = [{"outcome": "error", "error_side": side, "conversation_id": f"c{k}"}
            for k, side in enumerate(["candidate", "candidate", "baseline", "both", "judge"])]  # fmt: skip
    c = components(rows)
    assert (c.a, c.b) == ([0.0, 0.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0])  # the judge failure is not counted
    assert c.error_losses == {"candidate": 2, "baseline": 1, "both": 1}
    judged = components(rows, Estimand(over="judged"))
    assert len(judged.a) == 3  # both-failed is no judged pair
    assert components(rows, Estimand(errors="exclude")).a == []


def test_weights_are_used_exactly_when_they_vary() -> None:
    same, _ = simulate_verdicts({"a": 20, "b": 20}, win_rate=0.5, weights={"a": 2.0, "b": 2.0}, seed=1)
    varying, _ = simulate_verdicts({"a": 20, "b": 20}, win_rate=0.5, weights={"a": 1.0, "b": 5.0}, seed=1)
    assert not win_rate(same).weighted
    assert win_rate(varying).weighted
    assert not win_rate(varying, weighted=False).weighted
    d = decide(varying, rule=None)
    assert d.non_inferiority.win_rate.weighted
    assert "weighted to the population" in d.estimand
    assert "weighted to the population" in str(d.non_inferiority)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["candidate", "baseline", "tie", "equivalent"]), st.integers(0, 6),
                          st.sampled_from([1.0, 2.5])), min_size=2, max_size=40), st.randoms())  # fmt: skip
def test_the_interval_does_not_depend_on_the_order_of_the_rows(cells: list[tuple[str, int, float]], rnd: Any) -> None:
    # A resumed run writes its verdicts in another order than a fresh one: the numbers must be the same, bit for bit.
    rows = [{"outcome": o, "conversation_id": f"c{c}", "stratum": f"s{c % 2}", "weight": w} for o, c, w in cells]
    shuffled = rows[:]
    rnd.shuffle(shuffled)
    assert win_rate(rows) == win_rate(shuffled)
