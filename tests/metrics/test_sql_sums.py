from __future__ import annotations

from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
from hypothesis import given, seed, settings
from hypothesis import strategies as st

from delta_eval.metrics.difference import PairedSums
from delta_eval.metrics.sql_sums import Metric, paired_sums


def test_a_metric_that_counts_no_row_has_the_sums_of_one_whose_rows_all_fail_its_condition() -> None:
    """``where="false"`` skips the aggregates, with the same (empty) sums in every group, beside metrics that count
    rows, and alone."""
    db = duckdb.connect()
    try:
        db.register("t", pa.table({"c": ["x", "x", "y", "z"], "g": ["a", "b", "a", "a"], "e": [1.0, 0.0, 1.0, 0.0]}))
        for others in ({}, {"k": Metric(a="e")}):
            skipped = paired_sums(db, "t", {"m": Metric(a="e", where="false"), **others}, cluster="c", group="g")
            counted = paired_sums(db, "t", {"m": Metric(a="e", where="e > 5"), **others}, cluster="c", group="g")
            assert skipped.keys() == counted.keys() == {"a", "b"}
            for g in skipped:
                for name, s in skipped[g].items():
                    c = counted[g][name]
                    assert (s.pairs, s.seen.shape) == (c.pairs, c.seen.shape)
                    for x, y in ((s.a, c.a), (s.ta, c.ta), (s.b, c.b), (s.tb, c.tb), (s.iid, c.iid)):
                        assert np.array_equal(x, y)
    finally:
        db.close()


def test_a_null_group_is_the_group_named_none_as_the_rows_name_it() -> None:
    """A null group and a group named "None" are one group (``str`` names a null "None", as the rows path does):
    the rows of both counted, not those of one of them alone."""
    db = duckdb.connect()
    try:
        rows_of = {"c": ["x", "y", "z", "x"], "g": [None, "None", None, "a"], "e": [1.0, 0.0, 1.0, 1.0]}
        db.register("t", pa.table(rows_of))
        for weight in ("1.0", "2.0"):
            got = paired_sums(db, "t", {"m": Metric(a="e", binary=True)}, cluster="c", group="g", weight=weight)
            assert got.keys() == {"None", "a"}
            rows = PairedSums.of([1.0, 0.0, 1.0], [0.0] * 3, clusters=["x", "y", "z"], weights=[float(weight)] * 3)
            s = got["None"]["m"]
            assert s.pairs == 3
            assert np.array_equal(s.a, rows.a)
            assert np.array_equal(s.ta, rows.ta)
    finally:
        db.close()


ROWS = st.lists(
    st.tuples(
        st.sampled_from(["x", "y", "z", "é", "x0"]),  # conversation
        st.sampled_from([0.5, 1.0, 1.5, 2.0 / 3.0, 0.1, 7.25]),  # weight
        st.booleans(),  # a flag
        st.booleans(),  # b flag
        st.integers(0, 4),  # a count
        st.integers(0, 4),  # units
    ),
    max_size=40,
)


def _sums(rows: list[tuple[Any, ...]], metrics: dict[str, Metric]) -> dict[str, Any]:
    db = duckdb.connect()
    try:
        names = ["c", "w", "fa", "fb", "k", "t"]
        db.register(
            "t",
            pa.table(
                {n: [r[i] for r in rows] for i, n in enumerate(names)},
                schema=pa.schema(
                    [
                        ("c", pa.string()),
                        ("w", pa.float64()),
                        ("fa", pa.bool_()),
                        ("fb", pa.bool_()),
                        ("k", pa.int64()),
                        ("t", pa.int64()),
                    ]
                ),
            ),
        )
        return paired_sums(db, "t", metrics, cluster="c", weight="w")[""]
    finally:
        db.close()


WHOLE = {
    "flags": Metric(a="fa", b="fb", binary=True),
    "counts": Metric(a="least(k, t)", ta="t", b="CASE WHEN fb THEN t ELSE 0 END", tb="t", where="t > 0", integral=True),
}


@seed(41)
@settings(max_examples=150, deadline=None)
@given(ROWS, st.randoms(use_true_random=False))
def test_weighted_sums_of_whole_numbers_are_the_rows_sums_and_the_same_doubles_in_any_order(
    rows: list[tuple[Any, ...]], rnd: Any
) -> None:
    """Weighted sums of flags and counts (summed per conversation and weight, then weighted in numpy): the sums the
    rows give (PairedSums.of), and the same doubles whatever the order of the rows, as the decision must be."""
    got = _sums(rows, WHOLE)
    shuffled = list(rows)
    rnd.shuffle(shuffled)
    again = _sums(shuffled, WHOLE)
    for name, metric in WHOLE.items():
        s, r = got[name], again[name]
        for x, y in ((s.a, r.a), (s.ta, r.ta), (s.b, r.b), (s.tb, r.tb), (s.iid, r.iid), (s.seen, r.seen)):
            assert np.array_equal(x, y)  # to the bit
        mine = [row for row in rows if metric is WHOLE["flags"] or row[5] > 0]
        a = [float(r[2]) if metric is WHOLE["flags"] else float(min(r[4], r[5])) for r in mine]
        b = [float(r[3]) if metric is WHOLE["flags"] else float(r[5] if r[3] else 0) for r in mine]
        t = None if metric is WHOLE["flags"] else [float(r[5]) for r in mine]
        rows_sums = PairedSums.of(a, b, ta=t, tb=t, weights=[r[1] for r in mine], clusters=[r[0] for r in mine])
        assert s.pairs == rows_sums.pairs
        # (both with the conversations in the order of their names)
        for x, y in ((s.a, rows_sums.a), (s.ta, rows_sums.ta), (s.b, rows_sums.b), (s.tb, rows_sums.tb),
                     (s.iid, rows_sums.iid)):  # fmt: skip
            assert np.allclose(x, y, rtol=1e-12, atol=1e-12)
        assert np.array_equal(s.seen, rows_sums.seen)


def test_weighted_sums_of_other_values_are_compensated_sums_per_conversation() -> None:
    """Values that are not whole numbers are weighted row by row in DuckDB (fsum), as before: the same sums."""
    rows = [("x", 0.5, True, False, 1, 2), ("x", 1.5, False, True, 3, 1), ("y", 2.0, True, True, 0, 4)]
    frac = {"m": Metric(a="k / 3.0", ta="t", b="0.0")}
    s = _sums(rows, frac)["m"]
    assert np.allclose(s.a, [0.5 / 3 + 1.5, 0.0])
    assert np.allclose(s.ta, [0.5 * 2 + 1.5, 8.0])


@seed(43)
@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["x", "y", None]),
            st.sampled_from([None, 0.0, 0.5, 3.0, -1.0]),  # null weights too
            st.booleans(),
            st.integers(0, 3),
            st.sampled_from(["g", "h", None]),
        ),
        max_size=30,
    )
)
def test_weighted_sums_by_weight_are_the_compensated_sums_with_null_weights_and_groups(
    rows: list[tuple[Any, ...]],
) -> None:
    """The sums of whole numbers by weight are those fsum gives row by row (the same metric, not declared whole),
    in every group, with null conversations, groups and weights (a null weight adds nothing to a weighted sum)."""
    db = duckdb.connect()
    try:
        schema = pa.schema([("c", pa.string()), ("w", pa.float64()), ("f", pa.bool_()), ("k", pa.int64()),
                            ("g", pa.string())])  # fmt: skip
        db.register("t", pa.table({n: [r[i] for r in rows] for i, n in enumerate(schema.names)}, schema=schema))
        whole = {"m": Metric(a="k", ta="3", b="f::INT", tb="3", where="k > 0 OR f", integral=True)}
        plain = {"m": Metric(a="k", ta="3", b="f::INT", tb="3", where="k > 0 OR f")}
        by_weight = paired_sums(db, "t", whole, cluster="c", weight="w", group="g")
        fsum = paired_sums(db, "t", plain, cluster="c", weight="w", group="g")
    finally:
        db.close()
    assert by_weight.keys() == fsum.keys()
    for g in fsum:
        s, r = by_weight[g]["m"], fsum[g]["m"]
        assert s.pairs == r.pairs
        assert np.array_equal(s.seen, r.seen)
        # (fsum of nothing but nulls is null: NaN there, and in the totals over conversations; no weight adds
        # nothing here)
        for x, y in ((s.a, r.a), (s.ta, r.ta), (s.b, r.b), (s.tb, r.tb)):
            known = ~np.isnan(y)
            assert np.allclose(x[known], y[known], rtol=1e-12, atol=1e-12)
            assert not x[~known].any()
        if not np.isnan(r.iid).any():
            assert np.allclose(s.iid, r.iid, rtol=1e-12, atol=1e-12)
