from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from delta_eval.sampling.stratified import allocate

strata = st.dictionaries(st.text(min_size=1, max_size=5), st.integers(1, 500), min_size=1, max_size=12)


@given(strata, st.integers(1, 3000), st.integers(0, 3))
def test_allocation_sums_and_bounds(counts: dict[str, int], n: int, minimum: int) -> None:
    alloc = allocate(counts, n, minimum)
    total = sum(counts.values())
    assert set(alloc) == set(counts)
    assert sum(alloc.values()) == min(n, total)
    assert all(0 <= alloc[h] <= counts[h] for h in counts)
    if sum(min(minimum, c) for c in counts.values()) <= n:
        assert all(alloc[h] >= min(minimum, counts[h]) for h in counts)


@given(strata, st.integers(1, 3000))
def test_without_minimum_allocation_is_proportional_within_one(counts: dict[str, int], n: int) -> None:
    alloc = allocate(counts, n, min_per_stratum=0)
    total = sum(counts.values())
    if n >= total:
        assert alloc == counts
        return
    for h, c in counts.items():
        assert abs(alloc[h] - n * c / total) < 1.0 + 1e-9


def test_none_takes_everything_and_small_n_favours_large_strata() -> None:
    assert allocate({"a": 3, "b": 4}, None) == {"a": 3, "b": 4}
    assert allocate({"a": 10, "b": 50, "c": 20}, 2) == {"a": 0, "b": 1, "c": 1}
    assert allocate({"a": 80, "b": 15, "c": 5}, 10) == {"a": 8, "b": 1, "c": 1}
