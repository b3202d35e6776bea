from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from delta_eval.metrics import bootstrap_interval, score_of, wilson_interval, win_rate, win_rates_by

outcomes = st.sampled_from(["candidate", "baseline", "tie", "equivalent", "error"])


def rows(outs: list[str], weight: float = 1.0) -> list[dict[str, object]]:
    return [
        {"outcome": o, "weight": weight, "conversation_id": f"c{i // 3}", "stratum": f"s{i % 2}"}
        for i, o in enumerate(outs)
    ]


def test_wilson_known_values() -> None:
    lo, hi = wilson_interval(0.5, 100)
    assert lo == pytest.approx(0.4038, abs=1e-4)
    assert hi == pytest.approx(0.5962, abs=1e-4)
    assert wilson_interval(0.0, 10)[0] == 0.0
    assert wilson_interval(1.0, 10)[1] == 1.0
    assert wilson_interval(0.3, 0) == (0.0, 1.0)


@given(st.floats(0, 1), st.integers(1, 10_000))
def test_wilson_contains_the_estimate(p: float, n: int) -> None:
    lo, hi = wilson_interval(p, n)
    assert 0.0 <= lo <= p + 1e-12
    assert p - 1e-12 <= hi <= 1.0


def test_win_rate_counts_ties_as_half_and_equivalents_only_over_all() -> None:
    data = rows(["candidate", "candidate", "baseline", "tie", "equivalent", "equivalent", "error"])
    everything = win_rate(data, over="all")
    judged = win_rate(data, over="judged")
    assert everything.estimate == pytest.approx((2 + 0.5 + 1.0) / 6)
    assert judged.estimate == pytest.approx(2.5 / 4)
    assert (everything.pairs, judged.pairs, everything.errors) == (6, 4, 1)
    assert (judged.candidate, judged.baseline, judged.ties, judged.equivalent) == (2, 1, 1, 0)
    assert everything.method == "cluster"


def test_weighted_uses_weights() -> None:
    data = [
        {"outcome": "candidate", "weight": 3.0, "conversation_id": "a", "stratum": "x"},
        {"outcome": "baseline", "weight": 1.0, "conversation_id": "b", "stratum": "y"},
    ]
    w = win_rate(data, weighted=True)
    assert w.estimate == pytest.approx(0.75)
    assert w.method == "cluster"
    assert win_rate(data, weighted=True, method="bootstrap").method == "bootstrap"


@settings(max_examples=40, deadline=None)
@given(st.lists(outcomes, min_size=1, max_size=60), st.integers(0, 5))
def test_intervals_are_ordered_and_reproducible(outs: list[str], seed: int) -> None:
    for weighted in (False, True):
        w = win_rate(rows(outs), weighted=weighted, seed=seed, resamples=300)
        assert 0.0 <= w.ci_low <= w.ci_high <= 1.0
        if w.estimate is not None:
            assert w.ci_low - 1e-9 <= w.estimate <= w.ci_high + 1e-9
        assert w == win_rate(rows(outs), weighted=weighted, seed=seed, resamples=300)


def test_cluster_bootstrap_is_wider_when_turns_of_a_conversation_agree() -> None:
    # 20 conversations of 10 identical turns each carry far less information than 200 independent pairs.
    scores = [1.0 if c % 2 else 0.0 for c in range(20) for _ in range(10)]
    clusters = [f"c{c}" for c in range(20) for _ in range(10)]
    clustered = bootstrap_interval(scores, [1.0] * 200, clusters, ["s"] * 200, resamples=1000)
    independent = bootstrap_interval(scores, [1.0] * 200, [str(i) for i in range(200)], ["s"] * 200, resamples=1000)
    assert clustered[1] - clustered[0] > 2 * (independent[1] - independent[0])


def test_per_stratum_and_scores() -> None:
    by = win_rates_by(rows(["candidate", "baseline", "candidate", "candidate"]))
    assert [(w.stratum, w.estimate) for w in by] == [("s0", 1.0), ("s1", 0.5)]
    assert score_of("equivalent", "judged") is None
    assert score_of("tie") == 0.5
    assert win_rate([]).estimate is None


def test_any_table_of_verdicts_will_do(tmp_path: object) -> None:
    import duckdb
    import pyarrow as pa

    data = rows(["candidate", "baseline", "tie", "equivalent", "candidate", "error"])
    from_rows = win_rate(data)
    table = pa.Table.from_pylist(data)
    assert win_rate(table) == from_rows
    con = duckdb.connect()
    con.register("v", table)
    assert win_rate(con.sql("SELECT * FROM v")) == from_rows  # a DuckDB relation: the user's own query
    assert win_rate(con.sql("SELECT * FROM v WHERE outcome <> 'tie'")).ties == 0
    with pytest.raises(TypeError, match="Arrow table, a DuckDB relation"):
        win_rate(42)  # type: ignore[arg-type]
