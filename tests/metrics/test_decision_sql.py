"""The decision computed in DuckDB (Arrow tables, a run's views) is the decision computed from rows in memory: the
same outcome, what decided it and every number, on random verdicts and replays with gates of every metric, strata,
epochs, errors of each side, weights, the rule's own checks and the stage-2 audit (fixed seeds)."""

from __future__ import annotations

import contextlib
import math
import random
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import Phase, assume, given, seed, settings
from hypothesis import strategies as st

from delta_eval.metrics import decision_sql
from delta_eval.metrics import tallied as tallied_module
from delta_eval.metrics.checks import Check
from delta_eval.metrics.decision import DecisionRule, decide
from delta_eval.metrics.gates import METRICS, Gate, evaluate_gates
from delta_eval.metrics.sides import partitioned_quantile_interval, sorted_quantile_interval
from delta_eval.store.conversation_key import conversation_key, pair_key
from delta_eval.store.replay_tallies import replay_tally
from delta_eval.store.tables import TABLES
from delta_eval.store.tallies import tally

OUTCOMES = ["candidate", "baseline", "tie", "equivalent", "error"]
ERRORS = [None, "baseline replay failed: 500", "candidate replay failed: timeout",
          "baseline replay failed; candidate replay failed", "judge answer malformed"]  # fmt: skip
TEXTS = [None, "", "  \n", "\u3000", "ok", "Yes.", "not ok"]
SCORES = (None, "", "{}", '{"goal_reached": 1.0}', '{"goal_reached": 0.0, "tone": 3.0}', '{"goal_reached": 1}',
          "not json")  # fmt: skip
CHECKS = (Check(name="says_ok", text_matches="ok"), Check(name="no_calls", tool_not_called="cancel"))


@st.composite
def runs(draw: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Verdicts and replays of a random run: clustered conversations in strata over one to three epochs, every
    outcome, errors of each side, severities, stage-2 audits, weights that vary or not; replays with errors,
    missing sides and costs, tool calls, texts that are blank or not, recorded turns, whether production acted stored
    on the replays or not."""
    n = draw(st.integers(0, 24))
    conversations = draw(st.integers(1, 10))
    epochs = draw(st.integers(1, 3))
    vary = draw(st.booleans())
    # Whether production acted, on each replayed row: absent (an older run: the recorded rows tell), on every row,
    # or missing on some (the recorded rows tell again).
    acted = draw(st.sampled_from([None, st.booleans(), st.one_of(st.booleans(), st.booleans(), st.none())]))
    verdicts, replays = [], []
    for i in range(n):
        c = draw(st.integers(0, conversations - 1))
        e = 1 + i % epochs
        outcome = draw(st.sampled_from(OUTCOMES))
        error = draw(st.sampled_from(ERRORS)) if outcome == "error" else None
        stage = draw(st.sampled_from(["deterministic", "equivalence", "judge"]))
        pair = f"c{c}#{i // epochs}@{e}"
        conversation = None if draw(st.integers(0, 25)) == 0 else f"c{c}"
        verdicts.append({
            "pair_id": pair, "conversation_id": conversation,
            "epoch": e if epochs > 1 else draw(st.sampled_from([1, None])),
            "outcome": outcome,
            "preference": draw(st.one_of(st.none(), st.sampled_from([0.0, 0.25, 0.5, 1.0]))),
            "severity": draw(st.sampled_from([None, "none", "minor", "critical"])) if outcome != "error" else None,
            # Weights that are sums of powers of two: every sum is exact in either order of addition.
            "weight": float(1 + c % 3) / 2 if vary else 1.0,
            "stratum": f"s{c % 3}", "error": error,
            "error_side": draw(st.sampled_from([None, "baseline", "candidate", "both", "judge"])) if error else None,
            "stage": stage,
            "audit_outcome": draw(st.sampled_from([None, "candidate", "baseline", "tie"])) if stage == "equivalence"
            else None,
            # A session's goal, checked or not, as the scores' JSON text holds it (or text that is not JSON).
            "candidate_scores": draw(st.sampled_from(SCORES)), "baseline_scores": draw(st.sampled_from(SCORES)),
        })  # fmt: skip
        for side in ("baseline", "candidate", "recorded"):
            if draw(st.integers(0, 9)) == 0 or (side == "recorded" and draw(st.booleans())):
                continue
            calls = draw(st.one_of(st.none(), st.integers(0, 3)))
            steps = [{"tool_calls": [{"name": draw(st.sampled_from(["cancel", "book"])), "arguments": "{}"}
                                     for _ in range(calls or 0)]}]  # fmt: skip
            replays.append({
                "pair_id": pair, "conversation_id": conversation, "epoch": e, "side": side,
                "error": "boom" if side != "recorded" and draw(st.integers(0, 7)) == 0 else None,
                "latency_ms": draw(st.one_of(st.none(), st.sampled_from([120.0, 250.5, 900.0, 4000.0]))),
                "cost_usd": draw(st.one_of(st.none(), st.sampled_from([0.0, 0.25, 0.5, 1.0]))),
                "n_tool_calls": calls,
                "invalid_tool_calls": None if calls is None else draw(st.integers(0, calls)),
                "matches_recorded": draw(st.one_of(st.none(), st.booleans())),
                "text_instead_of_action": draw(st.one_of(st.none(), st.booleans())),
                "no_decision": draw(st.one_of(st.none(), st.none(), st.booleans())),
                "final_text": draw(st.sampled_from(TEXTS)),
                "steps": steps,
                **({"recorded_acted": draw(acted)} if acted is not None and side != "recorded" else {}),
            })  # fmt: skip
    return verdicts, replays


RULES = st.builds(
    DecisionRule,
    margin=st.sampled_from([0.0, 0.02, 0.1]),
    over=st.sampled_from(["all", "judged"]),
    weighted=st.sampled_from([True, False, "auto"]),
    errors=st.sampled_from(["loss", "exclude"]),
    gates=st.just(
        tuple(
            Gate(metric=m, max=0.0, test=t)
            for m, t in zip(
                [*METRICS, "check:says_ok", "check:no_calls", "check:unknown"],
                ["shown", "point", "upper"] * 5,
                strict=False,
            )
        )
    ),
    checks=st.sampled_from([(), CHECKS]),
    min_conversations=st.sampled_from([1, 3]),
)


def _close(x: Any, y: Any, where: str = "") -> None:
    if isinstance(x, float) and isinstance(y, float):
        same = (math.isnan(x) and math.isnan(y)) or (math.isinf(x) and x == y)
        assert same or math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12), (where, x, y)
    elif isinstance(x, dict):
        assert x.keys() == y.keys(), (where, x.keys(), y.keys())
        for k in x:
            _close(x[k], y[k], f"{where}.{k}")
    elif isinstance(x, list | tuple):
        assert len(x) == len(y), (where, x, y)
        for i, (a, b) in enumerate(zip(x, y, strict=True)):
            _close(a, b, f"{where}[{i}]")
    else:
        assert x == y, (where, x, y)


@seed(23)
@settings(max_examples=120, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(runs(), RULES, st.booleans())
def test_the_decision_in_duckdb_is_the_decision_on_rows(run: Any, rule: DecisionRule, with_replays: bool) -> None:
    verdicts, replays = run
    mine = decide(verdicts, replays if with_replays else None, rule)
    sql = decide(pa.Table.from_pylist(verdicts), pa.Table.from_pylist(replays) if with_replays else None, rule)
    assert (sql.outcome, sql.decided_by) == (mine.outcome, mine.decided_by)
    _close(sql.model_dump(), mine.model_dump())


@seed(29)
@settings(max_examples=20, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(runs(), RULES)
def test_the_decision_is_the_same_to_the_bit_whether_conversations_are_keyed_or_not(
    run: Any, rule: DecisionRule
) -> None:
    """Replays and verdicts with their conversations' keys (a run's, or an older run's once merged) are grouped on
    them, in the keys' order, and the replays' two sides joined on their pairs' keys; without, on the ids, in
    theirs: every figure of the decision is the same double."""
    verdicts, replays = run

    def keyed(rows: list[dict[str, Any]]) -> pa.Table:
        # (with their pairs' keys too: the replays' two sides, and each pair's weight, are joined on them)
        return pa.Table.from_pylist([{**r, "conversation_key": conversation_key(r["conversation_id"]),
                                      "pair_key": pair_key(r["pair_id"])} for r in rows])  # fmt: skip

    plain = decide(pa.Table.from_pylist(verdicts), pa.Table.from_pylist(replays), rule).model_dump()
    assert decide(keyed(verdicts), keyed(replays), rule).model_dump() == plain


@seed(31)
@settings(max_examples=60, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(runs(), RULES, st.integers(1, 4))
def test_the_decision_with_the_verdicts_tallies_is_the_decision_without(run: Any, rule: DecisionRule, cuts: int
                                                                        ) -> None:  # fmt: skip
    """Given the verdicts' tallies (a run's, counted a batch at a time), the decision sums its win rates from them
    where they serve: every figure is the same double as from the verdicts, and the counted ones are never read."""
    verdicts, replays = run
    assume(verdicts)  # (no table of no columns in DuckDB)
    table = pa.Table.from_pylist(
        [
            {**v, "conversation_key": None if v["conversation_id"] is None else conversation_key(v["conversation_id"])}
            for v in verdicts
        ]
    )
    con = duckdb.connect()
    con.register("verdicts", table)
    named = "replays" if replays else None
    if replays:
        con.register("replays", pa.Table.from_pylist(replays))
    step = max(1, -(-table.num_rows // cuts))
    tallies = pa.concat_tables([tally(table.slice(i, step)) for i in range(0, max(table.num_rows, 1), step)])
    served: list[bool] = []
    real = tallied_module.tallied

    def spy(*args: Any, **kwargs: Any) -> Any:
        out = real(*args, **kwargs)
        served.append(out is not None)
        return out

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tallied_module, "tallied", spy)
        mine = decide("verdicts", named, rule, con=con, tallies=tallies)
    assert mine.model_dump() == decide("verdicts", named, rule, con=con).model_dump()
    assert len(served) == 2  # the win rate over all pairs (and per stratum), over judged pairs


def _replay_tallies_in(con: Any, replays: list[dict[str, Any]], cuts: int) -> str:
    """The replays' tallies as a run writes them (one set a batch, the rows cut into ``cuts`` batches), registered
    in ``con``: their name."""
    table = pa.Table.from_pylist(replays, schema=TABLES["replays"].schema)
    step = max(1, -(-table.num_rows // cuts))
    con.register("rt", pa.concat_tables([replay_tally(table.slice(i, step))
                                         for i in range(0, max(table.num_rows, 1), step)]))  # fmt: skip
    return "rt"


def _as_run(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows with their conversations' and pairs' keys, as a run stores them."""
    return [{**r, "conversation_key": conversation_key(r["conversation_id"]), "pair_key": pair_key(r["pair_id"])}
            for r in rows]  # fmt: skip


@seed(37)
@settings(max_examples=25, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(runs(), RULES, st.integers(1, 4), st.booleans(), st.booleans())
def test_the_decision_with_the_replays_tallies_is_the_decision_without(
    run: Any, rule: DecisionRule, cuts: int, acted: bool, lists: bool
) -> None:
    """Given the replays' tallies (a run's, summed a batch at a time), the decision reads what it counts of the
    replays from them where they hold it: every figure is the same double as from the replays (costs of a quarter
    dollar: exact sums in any grouping). They hold it where every replay has its conversation's key, every replayed
    turn that did not fail its "no decision" and whether production acted, and no list by conversation's id is
    asked for; else the replays are read, for the same figures."""
    verdicts, replays = run
    assume(verdicts and replays)  # (no table of no columns in DuckDB)
    if acted:  # a run's replays: whether production acted, and "no decision", stored on every replayed turn
        replays = [{**r, "recorded_acted": bool(i % 2), "no_decision": bool(i % 3 == 0)} if r["side"] != "recorded"
                   else r for i, r in enumerate(replays)]  # fmt: skip
    replays = _as_run(replays)
    con = duckdb.connect()
    con.register("verdicts", pa.Table.from_pylist(_as_run(verdicts)))
    con.register("replays", pa.Table.from_pylist(replays, schema=TABLES["replays"].schema))
    rt = _replay_tallies_in(con, replays, cuts)
    read: list[bool] = []
    real = decision_sql._tallied_sums

    def spy(*args: Any, **kwargs: Any) -> Any:
        read.append(True)
        return real(*args, **kwargs)

    scope = contextlib.nullcontext() if lists else decision_sql.figures_only()
    with pytest.MonkeyPatch.context() as mp, scope:
        mp.setattr(decision_sql, "_tallied_sums", spy)
        mine = decide("verdicts", "replays", rule, con=con, replay_tallies=rt)
        theirs = decide("verdicts", "replays", rule, con=con)
    assert mine.model_dump() == theirs.model_dump()
    if lists:
        assert not read
    elif acted and all(r["conversation_id"] is not None for r in replays):
        assert read  # (else only where what they hold is stored: the drawn rows may have it, or an epoch's)


def test_the_decision_reads_no_verdict_for_its_win_rates_where_tallies_serve(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unweighted, with tallies of every verdict: the win rates over all pairs, per stratum and over judged pairs
    come from them (no query over the verdicts for them)."""
    verdicts = [{"pair_id": f"p{i}", "conversation_id": f"c{i % 9}", "conversation_key": conversation_key(f"c{i % 9}"),
                 "outcome": OUTCOMES[i % 5], "stratum": f"s{i % 3}", "stage": "judge", "weight": 1.0,
                 "error": ERRORS[i % 5] if OUTCOMES[i % 5] == "error" else None} for i in range(200)]  # fmt: skip
    table = pa.Table.from_pylist(verdicts)
    con = duckdb.connect()
    con.register("verdicts", table)
    expected = decide("verdicts", None, DecisionRule(), con=con).model_dump()

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the verdicts were read for a win rate")

    monkeypatch.setattr(tallied_module, "counted", refused)
    assert decide("verdicts", None, DecisionRule(), con=con, tallies=tally(table)).model_dump() == expected


def test_the_decision_on_views_of_parquet_files_is_the_decision_on_rows(tmp_path: Path) -> None:
    """Through a DuckDB connection's views over Parquet files (how a run's decision is taken), with several epochs
    and every gate."""
    gates = tuple(Gate(metric=m, max=0.01) for m in (*METRICS, "check:says_ok"))
    rule = DecisionRule(gates=gates, checks=CHECKS, margin=0.05)
    verdicts, replays = [], []
    for i in range(300):
        c, e = (i // 2) % 37, 1 + i % 2
        pair = f"c{c}#{i // 2}@{e}"
        outcome = OUTCOMES[(i * 7) % 5]
        verdicts.append({"pair_id": pair, "conversation_id": f"c{c}", "epoch": e, "outcome": outcome,
                         "severity": "critical" if i % 11 == 0 else "none", "weight": 1.0 + (c % 2) / 2,
                         "stratum": f"s{c % 4}", "error": ERRORS[i % 5] if outcome == "error" else None,
                         "stage": "equivalence" if outcome == "equivalent" else "judge",
                         "audit_outcome": "baseline" if i % 13 == 0 and outcome == "equivalent" else None})  # fmt: skip
        for side in ("baseline", "candidate", "recorded"):
            replays.append({"pair_id": pair, "conversation_id": f"c{c}", "epoch": e, "side": side,
                            "error": "boom" if (i + len(side)) % 17 == 0 else None, "latency_ms": 100.0 + i,
                            "cost_usd": 0.5 if side == "candidate" else 0.25, "n_tool_calls": i % 3,
                            "invalid_tool_calls": int(i % 7 == 0), "matches_recorded": i % 2 == 0,
                            "text_instead_of_action": i % 5 == 0, "no_decision": None,
                            "final_text": TEXTS[(i + len(side)) % len(TEXTS)],
                            "steps": [{"tool_calls": [{"name": "cancel", "arguments": "{}"}] * (i % 2)}]})  # fmt: skip
    pq.write_table(pa.Table.from_pylist(verdicts), tmp_path / "v.parquet")
    pq.write_table(pa.Table.from_pylist(replays), tmp_path / "r.parquet")
    con = duckdb.connect()
    con.execute(f"CREATE VIEW verdicts AS SELECT * FROM read_parquet('{tmp_path / 'v.parquet'}')")
    con.execute(f"CREATE VIEW replays AS SELECT * FROM read_parquet('{tmp_path / 'r.parquet'}')")
    sql = decide("verdicts", "replays", rule, con=con)
    mine = decide(verdicts, replays, rule)
    assert len(mine.epochs) == 2
    assert mine.consistency
    assert mine.audit["audited"] > 0
    assert {g.passed for g in mine.gates} >= {True, False}
    _close(sql.model_dump(), mine.model_dump())
    # The views it made are gone: the connection is the caller's.
    assert {r[0] for r in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()} == {
        "verdicts", "replays"}  # fmt: skip
    # A connection whose settings give text to Arrow as large strings decides the same.
    con.execute("SET arrow_large_buffer_size = true")
    assert decide("verdicts", "replays", rule, con=con).model_dump() == sql.model_dump()


def test_a_source_that_cannot_be_made_leaves_no_view_in_the_callers_connection() -> None:
    """The replays named are not there: the error reaches the caller, and the view made of the verdicts first is
    dropped (the connection is the caller's)."""
    con = duckdb.connect()
    con.register("verdicts", pa.Table.from_pylist([{"pair_id": "p", "conversation_id": "c", "outcome": "tie"}]))
    try:
        decide("verdicts", "no_such_replays", DecisionRule(), con=con)
    except duckdb.CatalogException:
        pass
    else:
        raise AssertionError("a missing table of replays was not reported")
    views = {r[0] for r in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
    assert views == {"verdicts"}  # the registered table alone


def test_an_empty_table_of_no_columns_is_decided_as_its_rows_are() -> None:
    """``pa.Table.from_pylist([])`` (no rows, so no columns) for the replays, or the verdicts: the decision of the
    empty rows, not DuckDB refusing to register a table without columns."""
    verdicts = [{"pair_id": "p", "conversation_id": "c", "outcome": "tie"}]
    for v, r in ((verdicts, []), ([], []), ([], None)):
        mine = decide(v, r, DecisionRule())
        sql = decide(pa.Table.from_pylist(v), None if r is None else pa.Table.from_pylist(r), DecisionRule())
        _close(sql.model_dump(), mine.model_dump())


def test_the_undecided_gate_without_undecided_verdicts_is_the_gate_summed_per_conversation(monkeypatch: Any) -> None:
    """No verdict undecided: the gate's sums come from the win rate's count of conversations, not from grouping the
    verdicts by conversation; its result is the same to the last bit (one conversation, several, errors of a
    replay counted as losses, several strata, a conversation in two)."""
    import delta_eval.metrics.decision_sql as decision_sql

    real = decision_sql._none_undecided
    taken: list[bool] = []

    def spy(*args: Any) -> Any:
        found = real(*args)
        taken.append(found is not None)
        return found

    rule = DecisionRule(gates=(Gate(metric="undecided_rate", max=0.05), Gate(metric="undecided_rate", max=0.0)))
    for n, conversations in ((1, 1), (5, 1), (40, 7), (300, 61)):
        verdicts = [{"pair_id": f"p{i}", "conversation_id": f"c{i % conversations}",
                     "outcome": OUTCOMES[(i * 3) % 5], "stratum": f"s{(i % conversations) % 3 + (i == 4)}",
                     "error": ERRORS[1 + i % 3] if OUTCOMES[(i * 3) % 5] == "error" else None}
                    for i in range(n)]  # fmt: skip
        table = pa.Table.from_pylist(verdicts)
        monkeypatch.setattr(decision_sql, "_none_undecided", spy)
        fast = decide(table, None, rule).gates
        monkeypatch.setattr(decision_sql, "_none_undecided", lambda *args: None)
        grouped = decide(table, None, rule).gates
        assert [g.model_dump() for g in fast] == [g.model_dump() for g in grouped]
        assert [g.model_dump() for g in fast] == [g.model_dump() for g in decide(verdicts, None, rule).gates]
    assert taken
    assert all(taken)
    # An undecided verdict, or one of no conversation: grouped per conversation, as before.
    for extra in ({"outcome": "error", "error": "judge answer malformed"}, {"outcome": "tie", "conversation_id": None}):
        taken.clear()
        monkeypatch.setattr(decision_sql, "_none_undecided", spy)
        rows = [{"pair_id": "a", "conversation_id": "c", "outcome": "tie"}, {"pair_id": "b", "conversation_id": "d",
                                                                            "error": None, **extra}]  # fmt: skip
        assert decide(pa.Table.from_pylist(rows), None, rule).gates == decide(rows, None, rule).gates
        assert taken == [False]


def test_a_decision_of_figures_only_has_every_figure_and_no_list_of_latencies_or_costs() -> None:
    """Within figures_only (what the analysis' summary keeps of a decision), the sides list no latency and no cost
    of a conversation, and every other number is the same (conversations counted, the cost per conversation, the
    cost ratio's gate)."""
    from delta_eval.metrics.decision_sql import figures_only

    verdicts, replays = [], []
    for i in range(120):
        c = i % 17
        verdicts.append({"pair_id": f"p{i}", "conversation_id": f"c{c}", "outcome": OUTCOMES[i % 4],
                         "stratum": f"s{c % 3}"})  # fmt: skip
        for side in ("baseline", "candidate"):
            replays.append({"pair_id": f"p{i}", "conversation_id": f"c{c}", "side": side,
                            "error": "boom" if i % 29 == 0 else None, "latency_ms": 100.0 + i * (1 + len(side)),
                            "cost_usd": None if (i, side) == (7, "baseline") else 0.125 * (1 + i % 3),
                            "n_tool_calls": i % 3})  # fmt: skip
    v, r = pa.Table.from_pylist(verdicts), pa.Table.from_pylist(replays)
    full = decide(v, r, DecisionRule())
    with figures_only():
        lean = decide(v, r, DecisionRule())
    assert decide(v, r, DecisionRule()).model_dump() == full.model_dump()  # the block's end restores the lists
    for side, m in lean.sides.items():
        assert m.latencies_ms == []
        assert m.costs_by_conversation == {}
        assert full.sides[side].latencies_ms
        assert m.conversations == len(full.sides[side].costs_by_conversation) == 17
    assert full.sides["candidate"].cost_per_conversation is not None
    assert full.sides["baseline"].cost_per_conversation is None  # one turn unpriced
    strip = {"sides": {side: {"latencies_ms", "costs_by_conversation"} for side in full.sides}}
    assert lean.model_dump(exclude=strip) == full.model_dump(exclude=strip)
    assert lean.lines() == full.lines()
    # The cost ratio of sides of figures only cannot be computed again from them: said, not "no conversation
    # priced" (the decision's own gate has it); from the full sides it is the decision's.
    gate = Gate(metric="cost_ratio", max=2.0)
    with pytest.raises(ValueError, match="lists=True"):
        evaluate_gates([gate], v, lean.sides)
    again = evaluate_gates([gate], v, full.sides)[0]
    assert (again.value, again.ci_low, again.ci_high) == next(
        (g.value, g.ci_low, g.ci_high) for g in decide(v, r, DecisionRule(gates=(gate,))).gates
    )


@pytest.mark.parametrize("seed_", range(8))
def test_a_runs_side_rates_are_the_same_to_the_bit_keyed_or_not(seed_: int) -> None:
    """Hundreds of conversations (where the order float residuals are summed in shows in the last bits): each
    side's rates and the error gate, alone (its shortcut, in the keys' order) and beside another replay gate (the
    join, in the ids' order), are the same doubles with the replays keyed or not."""
    rng = random.Random(seed_)
    verdicts, replays = [], []
    conversations = rng.randrange(30, 400)
    for i in range(rng.randrange(200, 1500)):
        c, pair = rng.randrange(conversations), f"p{i}"
        verdicts.append({"pair_id": pair, "conversation_id": f"conv-{c}", "outcome": rng.choice(OUTCOMES[:3]),
                         "weight": 1.0, "stage": "judge"})  # fmt: skip
        for side in ("baseline", "candidate"):
            calls = rng.randrange(4)
            replays.append({"pair_id": pair, "conversation_id": f"conv-{c}", "side": side, "epoch": 1,
                            "error": "boom" if rng.random() < 0.07 else None, "latency_ms": 100.0, "cost_usd": 0.01,
                            "n_tool_calls": calls, "invalid_tool_calls": rng.randrange(calls + 1),
                            "final_text": "ok"})  # fmt: skip
    keyed = pa.Table.from_pylist([{**r, "conversation_key": conversation_key(r["conversation_id"])} for r in replays])
    for gates in (("error_rate",), ("error_rate", "invalid_tool_call_rate")):
        rule = DecisionRule(gates=tuple(Gate(metric=m, max=0.05) for m in gates))
        plain = decide(pa.Table.from_pylist(verdicts), pa.Table.from_pylist(replays), rule).model_dump()
        assert decide(pa.Table.from_pylist(verdicts), keyed, rule).model_dump() == plain


def test_the_sides_order_is_checked_not_sorted_where_the_rows_come_in_it() -> None:
    """By side (text order), then key: rows in that order need no sort (None); others, and rows with a null side
    or key (no caller's have one), get lexsort's order."""
    import pyarrow as pa

    from delta_eval.metrics.decision_sql import _by_side_then_key

    def order(grp: list[str | None], cl: list[int | None]) -> list[int] | None:
        found = _by_side_then_key(pa.table({"grp": pa.array(grp, pa.string()), "cl": pa.array(cl, pa.int64())}))
        return None if found is None else found.tolist()

    assert order(["baseline", "baseline", "candidate", "é"], [1, 5, -3, 0]) is None
    assert order(["baseline", "candidate", "baseline"], [1, 2, 0]) == [2, 0, 1]
    assert order(["candidate", "candidate", "baseline"], [5, 1, 9]) == [2, 1, 0]
    assert order(["baseline", None, "baseline"], [2, 1, 1]) == [2, 0, 1]
    assert order(["baseline", "baseline"], [None, 1]) is not None


def _weighted_run(seed_: int, pairs: int = 400, conversations: int = 60) -> tuple[list[dict[str, Any]], ...]:
    """Verdicts and replays of a complete run sampled by stratum: every verdict of a conversation has its
    stratum's weight (not sums of powers of two: the sums' last bits depend on the order they are added in),
    severities on the losses, errors of each side."""
    rng = random.Random(seed_)
    weights = (0.4, 1.3, 2.2, 3.7)
    verdicts, replays = [], []
    for i in range(pairs):
        c = rng.randrange(conversations)
        pair = f"c{c}#{i}"
        outcome = rng.choice(OUTCOMES)
        error = rng.choice(ERRORS[1:]) if outcome == "error" else None
        severity = rng.choice(["none", "minor", "critical"]) if outcome != "error" else None
        verdicts.append({"pair_id": pair, "conversation_id": f"c{c}", "outcome": outcome, "stratum": f"s{c % 4}",
                         "weight": weights[c % 4], "error": error, "stage": "judge", "severity": severity})  # fmt: skip
        for side in ("baseline", "candidate"):
            replays.append({"pair_id": pair, "conversation_id": f"c{c}", "side": side,
                            "error": "boom" if rng.random() < 0.15 else None, "latency_ms": 100.0 + i,
                            "cost_usd": 0.25, "n_tool_calls": i % 3, "invalid_tool_calls": int(i % 7 == 0),
                            "matches_recorded": True, "text_instead_of_action": False, "no_decision": False,
                            "recorded_acted": True})  # fmt: skip
    return verdicts, replays


def _keyed(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist([{**r, "conversation_key": conversation_key(r["conversation_id"]),
                                  "pair_key": pair_key(r["pair_id"])} for r in rows])  # fmt: skip


def _spied(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """What each check of the pairs' weights (``_weights_are_the_pairs``) answers, in order."""
    taken: list[bool] = []
    real = decision_sql._weights_are_the_pairs

    def spy(*args: Any) -> bool:
        taken.append(real(*args))
        return taken[-1]

    monkeypatch.setattr(decision_sql, "_weights_are_the_pairs", spy)
    return taken


@pytest.mark.parametrize("seed_", [1, 2, 3])
def test_the_weighted_gates_of_a_run_sampled_by_stratum_take_each_conversations_weight(
    monkeypatch: pytest.MonkeyPatch, seed_: int
) -> None:
    """One weight per conversation (a run's) and every candidate replay's pair with its verdict: the weighted verdict
    and error-rate gates read each conversation's weight (no join of every pair to its verdict, no grouping by
    weight). Their figures are the rows path's and the joined path's to 1e-9, the same to the last bit keyed or not
    and in any order of the rows (the conversations' sums added up in an order of their own)."""
    verdicts, replays = _weighted_run(seed_)
    rule = DecisionRule(weighted=True)
    taken = _spied(monkeypatch)
    fast = decide(pa.Table.from_pylist(verdicts), pa.Table.from_pylist(replays), rule)
    assert taken == [True]
    found = {g.gate.metric for g in fast.gates if g.value is not None}
    assert found >= {"critical_rate", "severity_rate", "error_rate", "undecided_rate"}
    assert decide(_keyed(verdicts), _keyed(replays), rule).model_dump() == fast.model_dump()
    shuffled = random.Random(seed_)
    v, r = verdicts[:], replays[:]
    shuffled.shuffle(v)
    shuffled.shuffle(r)
    assert decide(_keyed(v), _keyed(r), rule).model_dump() == fast.model_dump()
    assert taken == [True, True, True]
    _close(fast.model_dump(), decide(verdicts, replays, rule).model_dump())
    monkeypatch.setattr(decision_sql, "_weighted_conversations", lambda *args: None)
    joined = decide(pa.Table.from_pylist(verdicts), pa.Table.from_pylist(replays), rule)
    assert len(taken) == 3  # not asked: no conversation's weight
    _close(fast.model_dump(), joined.model_dump())


@pytest.mark.parametrize(
    "damage",
    ["two weights in a conversation", "a pair without its verdict", "a verdict in another conversation",
     "a verdict of no pair", "two verdicts of a pair"],
)  # fmt: skip
def test_weighted_gates_join_each_pair_to_its_verdict_where_a_conversations_weight_is_not_every_pairs(
    monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    """Where a conversation's verdicts have two weights, or the candidate replays and the verdicts do not name the
    same pairs in the same conversations, as many times each, the weighted gates join each pair to its verdict (its
    weight, 1 without one) as the rows path does: the same figures as it. (With a conversation's weight the first
    two kinds of damage give another error rate; the last two would not, but are not told apart.)"""
    verdicts, replays = _weighted_run(4, pairs=120, conversations=20)
    if damage == "two weights in a conversation":
        verdicts[0] = {**verdicts[0], "weight": 9.5}
    elif damage == "a pair without its verdict":
        verdicts = verdicts[1:]
    elif damage == "a verdict in another conversation":
        # (with that conversation's weight: each conversation's verdicts still have one)
        other = next(v for v in verdicts if v["weight"] != verdicts[0]["weight"])
        verdicts[0] = {**verdicts[0], "conversation_id": other["conversation_id"], "weight": other["weight"]}
    elif damage == "a verdict of no pair":
        verdicts.append({**verdicts[0], "pair_id": "nowhere"})
    else:
        verdicts.append({**verdicts[0], "outcome": "tie"})
    rule = DecisionRule(weighted=True, gates=(Gate(metric="error_rate", max=0.02),
                                              Gate(metric="undecided_rate", max=0.05)))  # fmt: skip
    taken = _spied(monkeypatch)
    sql = decide(pa.Table.from_pylist(verdicts), pa.Table.from_pylist(replays), rule)
    assert taken == ([] if damage == "two weights in a conversation" else [False])
    _close(sql.model_dump(), decide(verdicts, replays, rule).model_dump())
    assert decide(_keyed(verdicts), _keyed(replays), rule).model_dump() == sql.model_dump()


def test_a_weighted_error_gate_over_verdicts_and_replays_that_differ_gives_another_rate() -> None:
    """What the check of the pairs guards: were a pair without a verdict given its conversation's weight rather than
    1, the weighted error rate would differ (the test above would then fail)."""
    verdicts, replays = _weighted_run(4, pairs=120, conversations=20)
    rule = DecisionRule(weighted=True, gates=(Gate(metric="error_rate", max=0.02),))
    failed = next(r["pair_id"] for r in replays if r["side"] == "candidate" and r["error"])
    whole = decide(verdicts, replays, rule).gates[0].value
    less = decide([v for v in verdicts if v["pair_id"] != failed], replays, rule).gates[0].value
    assert whole is not None
    assert less is not None
    assert not math.isclose(whole, less, rel_tol=1e-9)


@seed(37)
@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=60),
       st.sampled_from([0.05, 0.5, 0.9, 0.95, 0.99]), st.sampled_from([0.8, 0.95, 0.99]))  # fmt: skip
def test_a_quantiles_interval_of_partitioned_values_is_that_of_the_sorted_values(
    values: list[float], q: float, confidence: float
) -> None:
    """The figures only decision partitions the latencies rather than sort them: the same quantile and bounds, to
    the bit, and the values themselves kept."""
    x = np.array(values)
    assert partitioned_quantile_interval(x, q, confidence) == sorted_quantile_interval(np.sort(values), q, confidence)
    assert sorted(x.tolist()) == sorted(values)


@pytest.mark.parametrize("seed_", range(6))
def test_a_weighted_error_gate_is_the_same_to_the_bit_by_either_path(
    monkeypatch: pytest.MonkeyPatch, seed_: int
) -> None:
    """Conversations' keys on the replays but not on every verdict (an older batch merged without them): the error
    gate joins each pair to its verdict; without keys it takes each conversation's weight. Candidate errors in a few
    conversations (where the interval reads the as-if-independent products): both add those up per weight, the
    same doubles (they differed in the last bit when the joined path added them up per conversation)."""
    verdicts, replays = _weighted_run(seed_)
    rng = random.Random(seed_)
    replays = [{**r, "error": "boom" if rng.random() < 0.01 else None} if r["side"] == "candidate" else r
               for r in replays]  # fmt: skip
    rule = DecisionRule(weighted=True, gates=(Gate(metric="error_rate", max=0.02),))
    taken = _spied(monkeypatch)
    fast = decide(pa.Table.from_pylist(verdicts), pa.Table.from_pylist(replays), rule)
    partly = _keyed(verdicts)
    keys = partly.column("conversation_key").to_pylist()
    keys[0] = None
    partly = partly.set_column(partly.schema.get_field_index("conversation_key"), "conversation_key",
                               pa.array(keys, pa.int64()))  # fmt: skip
    for v in (pa.Table.from_pylist(verdicts), partly):
        joined = decide(v, _keyed(replays), rule)
        assert joined.model_dump() == fast.model_dump()
    assert taken == [True, False, False]
