from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa

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
