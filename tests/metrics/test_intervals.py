"""The variances of linearised totals over one stratum (every rate of a side, every gate) are those of the general
stratified computation to the last bit: the shortcut that skips grouping clusters by stratum adds up the same
values in the same order."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from delta_eval.metrics.intervals import _grouped_moments as _grouped
from delta_eval.metrics.intervals import strata_codes, stratified_moments


def test_one_stratum_gives_the_general_computations_moments_to_the_last_bit() -> None:
    rng = np.random.default_rng(5)
    for trial in range(400):
        g = int(rng.integers(0, 6)) if trial % 4 == 0 else int(rng.integers(0, 3000))
        strata = np.full(g, ["", "tier=a", "é"][trial % 3], dtype=str)
        za = rng.normal(size=g) * 10.0 ** float(rng.integers(-6, 6))
        zb = np.round(rng.normal(size=g), 2)
        if trial % 5 == 0:
            za[: g // 3] = -0.0
        got, want = stratified_moments(strata, za, zb), _grouped(strata, za, zb)
        assert repr(got) == repr(want), (g, got, want)
    # Several strata: the general computation itself.
    strata = np.array(["a", "a", "b", "b", "c"])
    z = np.array([1.0, -1.0, 2.0, -2.0, 0.5])
    assert stratified_moments(strata, z, z) == _grouped(strata, z, z)


@given(st.lists(st.sampled_from(["", "a", "b", "é", "task_type=t1", "Z"]), max_size=40), st.booleans())
def test_strata_codes_are_what_np_unique_gives(names: list[str], ordered: bool) -> None:
    strata = np.asarray(sorted(names) if ordered else names, dtype=str)
    mine, which = strata_codes(strata)
    theirs, their_which = np.unique(strata, return_inverse=True)
    assert mine.tolist() == theirs.tolist()
    assert which.tolist() == their_which.reshape(-1).tolist()
