from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from delta_eval.metrics.intervals import ClusterSums
from delta_eval.metrics.key_order import by_key_then
from delta_eval.metrics.sides import _one_per_cluster_mean

# Few distinct values, so that keys and pairs of key and second value tie often; signed zeros, infinities.
VALUES = st.sampled_from([0.0, -0.0, 1.0, 1.5, -2.0, 3.25, 1e-300, 7e10, np.inf, -np.inf, np.nan, -np.nan])
KEYS = st.one_of(VALUES, st.floats(width=64))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(KEYS, VALUES), max_size=80), st.booleans(), st.integers(0, 4))
def test_the_values_come_in_lexsorts_order(rows: list[tuple[float, float]], runs: bool, parts: int) -> None:
    """In any order of the rows, or in ``parts`` sorted runs (a run's tallies, each part by key)."""
    if parts:
        rows = [r for i in range(parts) for r in sorted(rows[i::parts], key=lambda r: (np.isnan(r[0]), r[0]))]
    key = np.array([k for k, _ in rows], dtype=float)
    then = np.array([t for _, t in rows], dtype=float)
    order = by_key_then(key, then, runs=runs)
    want = np.lexsort((then, key))
    assert sorted(order.tolist()) == list(range(len(rows)))
    # The same sequence of values (rows equal in both may swap: nothing tells them apart but a sign), NaNs too.
    assert np.array_equal(key[order], key[want], equal_nan=True)
    assert np.array_equal(then[order], then[want], equal_nan=True)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0.5, 1.0, 1.25, 2.0, 1 / 3]), st.floats(0.01, 100.0)), min_size=1,
                max_size=60), st.randoms(use_true_random=False))  # fmt: skip
def test_the_cost_ratios_mean_is_lexsorts_to_the_bit(rows: list[tuple[float, float]], rng: object) -> None:
    """The cost ratio's mean (one conversation a cluster) sums in the order lexsort gives, in any input order."""
    values = np.array([v for v, _ in rows])
    weights = np.array([w for _, w in rows])
    order = np.lexsort((weights, values))
    y, w = values[order], weights[order]
    want = ClusterSums(strata=[""] * len(y), wy=w * y + 0.0, w=w + 0.0, w2y2=w * w * y * y + 0.0,
                       w2y=w * w * y + 0.0, w2=w * w + 0.0, n=len(y)).mean()  # fmt: skip
    shuffled = list(range(len(rows)))
    rng.shuffle(shuffled)  # type: ignore[attr-defined]
    assert _one_per_cluster_mean(values[shuffled], weights[shuffled]) == want


def test_integer_keys_and_a_cost_ratio_of_subnormal_costs() -> None:
    """Keys of any numeric type; a cost ratio whose weights square to zero (subnormal baseline costs) still has an
    interval (the square of their total is no longer divided by)."""
    import pyarrow as pa

    from delta_eval.metrics.sides import cost_ratio_of

    key = np.array([3, -(2**63), 3, 2**63 - 1, 0], dtype=np.int64)
    then = np.array([2.0, 1.0, 1.0, 0.0, 5.0])
    order = by_key_then(key, then)
    assert order.tolist() == np.lexsort((then, key)).tolist()
    ratio = cost_ratio_of(pa.array([1e-310, 2e-310, 3e-310]), pa.array([1e-310, 1e-310, 2e-310]))
    assert ratio.value is not None
    assert abs(ratio.value - 1.5) < 1e-9
