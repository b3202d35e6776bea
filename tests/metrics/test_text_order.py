from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given, settings
from hypothesis import strategies as st

from delta_eval.metrics.text_order import text_order

# Short names mostly (the numpy path), some with a zero byte or longer than 32 bytes (Arrow's), nulls, any script.
NAMES = st.one_of(
    st.none(),
    st.text(alphabet=st.sampled_from(["a", "b", "c", "#", "1", "é", "日", "\U0001f600", " "]), max_size=12),
    st.text(max_size=40),
)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 3).flatmap(lambda k: st.lists(st.tuples(*[NAMES] * k), max_size=60)), st.integers(0, 3),
       st.booleans())  # fmt: skip
def test_the_order_is_arrows(rows: list[tuple[str | None, ...]], cut: int, large: bool) -> None:
    """Whatever the names, their chunks, slices and offsets' width."""
    k = len(rows[0]) if rows else 1
    kind = pa.large_string() if large else pa.string()
    columns = []
    for i in range(k):
        values = [r[i] for r in rows]
        whole = pa.array(["x"] * cut + values, kind).slice(cut)  # an array that starts at an offset
        columns.append(pa.chunked_array([whole[: len(values) // 2], whole[len(values) // 2 :]], kind))
    table = pa.table({f"k{i}": c for i, c in enumerate(columns)})
    want = pc.sort_indices(table, sort_keys=[(f"k{i}", "ascending") for i in range(k)]).to_numpy()
    assert text_order(columns).tolist() == want.tolist()
