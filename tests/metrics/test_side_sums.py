"""The sides' sums of the decision in DuckDB (``decision_sql``'s one GROUP BY with the fewest aggregates, and the
products of the invalid-tool-call rate as totals) are exactly the sums of the straightforward query of
:func:`~delta_eval.metrics.sql_sums.paired_sums` over the same metrics: every per-conversation array, which
conversations saw an event, the products, the pairs, each conversation's cost. Random replay tables with odd
values too (negative counts, more invalid calls than calls, counts whose squares are past 2**53, nulls)."""

from __future__ import annotations

from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
from hypothesis import Phase, example, given, seed, settings
from hypothesis import strategies as st

from delta_eval.metrics import decision_sql
from delta_eval.metrics.decision_sql import Source
from delta_eval.metrics.difference import PairedSums
from delta_eval.metrics.sql_sums import Metric, paired_sums
from delta_eval.store.conversation_key import conversation_key

#: The sides' metrics as the decision read them through paired_sums (the reference).
REFERENCE = {
    "error_rate": Metric(a="error IS NOT NULL", binary=True),
    "invalid_tool_call_rate": decision_sql.INVALID_TOOL_CALLS,
    "matches_recorded_rate": Metric(a="coalesce(matches_recorded, false)", where="error IS NULL", binary=True),
    "no_decision_rate": Metric(a="nd", where="nd IS NOT NULL", binary=True),
}
COST = "CASE WHEN count(cost_usd) = count(*) THEN fsum(cost_usd) ELSE 'NaN'::DOUBLE END"
COUNTS = st.one_of(st.none(), st.integers(0, 3), st.sampled_from([-1, 7, 2**30, 123456789, 98765431]))


@st.composite
def replays(draw: Any) -> list[dict[str, Any]]:
    out = []
    for i in range(draw(st.integers(0, 30))):
        side = draw(st.sampled_from(["baseline", "candidate", "recorded"]))
        out.append({
            "pair_id": f"p{draw(st.integers(0, 12))}", "side": side,
            "conversation_id": draw(st.sampled_from([None, "c0", "c1", "c2", "é", "c10"])),
            "error": "boom" if draw(st.integers(0, 5)) == 0 else None,
            "n_tool_calls": draw(COUNTS), "invalid_tool_calls": draw(COUNTS),
            "matches_recorded": draw(st.one_of(st.none(), st.booleans())),
            "text_instead_of_action": draw(st.one_of(st.none(), st.booleans())),
            "no_decision": draw(st.one_of(st.none(), st.booleans())),
            "final_text": draw(st.sampled_from([None, "", " ", "ok"])),
            "cost_usd": draw(st.one_of(st.none(), st.sampled_from([0.0, 0.1, 0.25, 1e-3]))),
            "latency_ms": 100.0 + i,
        })  # fmt: skip
    return out


def _same_conversations(x: PairedSums, y: PairedSums) -> None:
    """The same sums of the same conversations, in whatever order each lists them (counts: every total is the
    same double in any order)."""

    def each(s: PairedSums) -> list[tuple[Any, ...]]:
        return sorted(zip(s.strata, s.a, s.ta, s.b, s.tb, *s.seen, strict=True))

    assert each(x) == each(y)
    assert np.array_equal(x.iid, y.iid)
    assert x.pairs == y.pairs


def _same(x: PairedSums, y: PairedSums, where: str) -> None:
    for field in ("strata", "a", "ta", "b", "tb", "seen", "iid"):
        mine, theirs = getattr(x, field), getattr(y, field)
        assert mine.dtype.kind == theirs.dtype.kind, (where, field, mine.dtype, theirs.dtype)
        assert np.array_equal(mine, theirs), (where, field, mine, theirs)
    assert x.pairs == y.pairs, (where, x.pairs, y.pairs)


@seed(20)
@settings(max_examples=150, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(replays(), st.sampled_from(["all", "some", "none"]))
@example([{"pair_id": f"p{i}", "side": side, "conversation_id": f"c{i % 3}", "error": None, "n_tool_calls": i,
           "invalid_tool_calls": 1, "matches_recorded": True, "text_instead_of_action": False, "no_decision": None,
           "final_text": "ok", "cost_usd": 0.1 * i, "latency_ms": 1.0}
          for i in range(7) for side in ("baseline", "candidate", "recorded")], "all")  # fmt: skip
def test_the_sides_sums_are_those_of_paired_sums(rows: list[dict[str, Any]], keyed: str) -> None:
    """With every replay's conversation keyed (grouped on the keys, ordered by them), some or none (on the ids)."""
    _same_side_sums(_keyed(rows, keyed))


def _keyed(rows: list[dict[str, Any]], keyed: str) -> list[dict[str, Any]]:
    """The replays with their conversations' keys (none for a replay of no conversation): every one's, every other
    one's, or none (no such column, as in a run written before replays had them)."""
    if keyed == "none":
        return rows
    return [{**r, "conversation_key": conversation_key(r["conversation_id"]) if keyed == "all" or i % 2 else None}
            for i, r in enumerate(rows)]  # fmt: skip


def test_a_conversation_of_more_turns_than_a_packed_count_holds_is_summed_as_well() -> None:
    """Past 2**13 turns of a side in a conversation the counts no longer fit their fields: each is summed alone."""
    many = [{"pair_id": f"p{i}", "side": side, "conversation_id": "long", "error": "boom" if i % 2 else None,
             "n_tool_calls": 1, "invalid_tool_calls": 0, "matches_recorded": i % 3 == 0,
             "text_instead_of_action": i % 5 == 0, "no_decision": i % 7 == 0, "final_text": "ok", "cost_usd": 0.1,
             "latency_ms": 100.0}
            for i in range(2**13 + 5) for side in ("baseline", "candidate", "recorded")]  # fmt: skip
    got = _same_side_sums([*many, {**many[0], "conversation_id": "short", "pair_id": "q"}])
    # The turns where production acted, from each pair's recorded row: counted (the join is what is compared).
    assert got["candidate"]["text_instead_of_action_rate"].ta.sum() > 0


def _same_side_sums(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Asserts that :func:`decision_sql._side_sums` gives :func:`paired_sums` of the reference metrics; returns
    the sums per side."""
    db = duckdb.connect()
    try:
        db.register("v", pa.table({"pair_id": pa.array([], pa.string())}))
        table = pa.Table.from_pylist(rows) if rows else pa.table({"pair_id": pa.array([], pa.string())})
        db.register("r", table)
        src = Source(db, "v", "r")
        recorded = any(r["side"] == "recorded" for r in rows)
        r = src.replays
        if recorded:
            source = (f"(SELECT r.* EXCLUDE (recorded_acted), coalesce(rec.acted, false) AS recorded_acted, "
                      f"{decision_sql._no_decision(src)} "
                      f"AS nd FROM {r} r LEFT JOIN (SELECT pair_id, bool_or(coalesce(n_tool_calls, 0) > 0) AS acted "
                      f"FROM {r} WHERE side = 'recorded' GROUP BY pair_id) rec ON rec.pair_id = r.pair_id "
                      "WHERE r.side <> 'recorded')")  # fmt: skip
        else:
            source = f"(SELECT * EXCLUDE (recorded_acted), false AS recorded_acted, {decision_sql._no_decision(src)} " \
                     f"AS nd FROM {r} WHERE side <> 'recorded')"  # fmt: skip
        metrics = dict(REFERENCE)
        if recorded:
            metrics["text_instead_of_action_rate"] = Metric(
                a="coalesce(text_instead_of_action, false)", where="error IS NULL AND recorded_acted", binary=True
            )
        theirs: dict[str, Any] = {}
        # Grouped on the keys where every replay has one, in their order: as text that sorts as they do.
        keyed = src.replays_keyed()
        assert keyed == (bool(rows) and all(r.get("conversation_key") is not None for r in rows)) or not rows
        cluster = (f"lpad((conversation_key::HUGEINT + {2**63})::VARCHAR, 20, '0')" if keyed
                   else "coalesce(conversation_id, 'None')")  # fmt: skip
        expected = paired_sums(db, source, metrics, cluster=cluster, group="side", extra={"cost": COST},
                               carry=["cost_usd"], per_conversation=theirs)  # fmt: skip
        found, got = decision_sql._side_sums(src, source, recorded)
        products = decision_sql._products(src)
        assert found["runs"] == theirs["runs"]
        names = theirs["cl"].to_pylist()
        assert found["cl"].to_pylist() == ([int(k) - 2**63 for k in names] if keyed else names)
        # Each conversation's id beside its key, for the costs listed by conversation.
        ids = {r["conversation_key"]: str(r["conversation_id"]) for r in rows} if keyed else {}
        assert found["names"].to_pylist() == ([ids[k] for k in found["cl"].to_pylist()] if keyed else names)
        assert np.array_equal(found["cost"], theirs["cost"].astype(float), equal_nan=True)
        assert set(got) == set(expected)
        for side, sums in expected.items():
            mine = got[side]
            mine["invalid_tool_call_rate"] = decision_sql._with_products(
                src, source, side, mine["invalid_tool_call_rate"], products.get(side)
            )
            assert set(mine) == set(sums), (side, set(mine), set(sums))
            for name, s in sums.items():
                _same(mine[name], s, f"{side} {name}")
        src.close()
        return got
    finally:
        db.close()


@st.composite
def pairs_of_replays(draw: Any) -> list[dict[str, Any]]:
    """Replays of pairs, complete (one baseline and one candidate replay each) or not (a side missing, a side
    twice, or a side's replay in another conversation than its pair's)."""
    out = []
    broken = draw(st.booleans())
    for i in range(draw(st.integers(0, 25))):
        conversation = draw(st.sampled_from([None, "c0", "c1", "c2", "é"]))
        for side in ("baseline", "candidate", "recorded"):
            times = draw(st.sampled_from([0, 1, 1, 1, 2])) if broken else 1
            for _ in range(times):
                moved = broken and draw(st.integers(0, 4)) == 0
                out.append({"pair_id": f"p{i}", "side": side, "conversation_id": "c9" if moved else conversation,
                            "error": "boom" if draw(st.integers(0, 3)) == 0 else None})  # fmt: skip
    return out


@seed(21)
@settings(max_examples=150, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(pairs_of_replays(), st.sampled_from(["all", "some", "none"]))
def test_the_error_gate_of_complete_pairs_is_that_of_the_join(rows: list[dict[str, Any]], keyed: str) -> None:
    """With the conversations keyed (the gate's in the order of their keys, the join's of their ids) or not."""
    rows = _keyed(rows, keyed)
    db = duckdb.connect()
    try:
        db.register("v", pa.table({"pair_id": pa.array([], pa.string())}))
        db.register("r", pa.Table.from_pylist(rows) if rows else pa.table({"pair_id": pa.array([], pa.string())}))
        src = Source(db, "v", "r")
        decision_sql.side_metrics_of(src)
        expected = decision_sql._replay_gates(src, ["error_rate"], "1.0", False, None)["error_rate"]
        got = decision_sql._error_gate(src)
        complete = sorted((r["pair_id"], r["side"]) for r in rows if r["side"] in ("baseline", "candidate")) == sorted(
            {(r["pair_id"], s) for r in rows for s in ("baseline", "candidate")}
        )
        if got is None:  # the join's sums, then: only where a pair is not complete
            assert not complete or not any(r["side"] == "candidate" for r in rows)
            return
        assert got[1] == expected[1]
        if expected[0] is None:
            assert got[0] is None
        elif src.replays_keyed():
            _same_conversations(got[0], expected[0])
            assert got[0].difference() == expected[0].difference()  # the interval too, to the bit
        else:
            _same(got[0], expected[0], "error_rate")
        src.close()
    finally:
        db.close()


def test_a_conversations_cost_is_the_same_whatever_order_its_rows_are_read_in() -> None:
    """Threads reading a run's row groups add a conversation's costs in any order; a plain sum of 0.1, 0.2 and 0.3
    is 0.6000000000000001 one way and 0.6 the other, which made a baseline against itself read a cost ratio of
    1 + 2e-16. Summed exactly rounded, in SQL and in Python alike, the cost is one number."""
    import math

    from delta_eval.metrics.sides import side_metrics

    def rows(costs: list[float]) -> list[dict[str, Any]]:
        return [{"pair_id": f"p{i}", "side": side, "conversation_id": "c", "error": None, "n_tool_calls": 0,
                 "invalid_tool_calls": 0, "matches_recorded": True, "text_instead_of_action": False,
                 "no_decision": False, "final_text": "ok", "cost_usd": cost, "latency_ms": 100.0}
                for i, cost in enumerate(costs) for side in ("baseline", "candidate")]  # fmt: skip

    found = []
    for costs in ([0.1, 0.2, 0.3], [0.3, 0.2, 0.1]):
        db = duckdb.connect()
        try:
            db.register("v", pa.table({"pair_id": pa.array([], pa.string())}))
            db.register("r", pa.Table.from_pylist(rows(costs)))
            src = Source(db, "v", "r")
            source = f"(SELECT *, false AS recorded_acted, {decision_sql._no_decision(src)} AS nd FROM r)"
            found.append(decision_sql._side_sums(src, source, False)[0]["cost"].tolist())
        finally:
            db.close()
        python = side_metrics(rows(costs))
        found.append([python[side].costs_by_conversation["c"] for side in ("baseline", "candidate")])
    assert found == [[math.fsum([0.1, 0.2, 0.3])] * 2] * 4
