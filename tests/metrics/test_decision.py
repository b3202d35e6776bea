from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import delta_eval as de
from delta_eval.metrics import DecisionRule, Gate, by_stratum, decide, evaluate_gates, side_metrics


def verdicts(n_conv: int, outcome: str = "candidate", per: int = 3, **extra: object) -> list[dict[str, object]]:
    return [{"outcome": outcome, "conversation_id": f"c{i}", "stratum": "s", **extra}
            for i in range(n_conv) for _ in range(per)]  # fmt: skip


def replay(side: str, conv: str, pair: str, **fields: object) -> dict[str, object]:
    row: dict[str, object] = {"side": side, "conversation_id": conv, "pair_id": pair, "error": None,
                              "latency_ms": 1000.0, "cost_usd": 0.01, "n_tool_calls": 1, "invalid_tool_calls": 0,
                              "matches_recorded": True, "text_instead_of_action": False}  # fmt: skip
    row.update(fields)
    return row


def test_critical_failures_are_compared_with_the_baselines_own() -> None:
    # The candidate wins most pairs, but loses 12 of them with a critical failure the baseline never made.
    rows = verdicts(100)
    for k in range(0, 36, 3):
        rows[k] = {**rows[k], "outcome": "baseline", "severity": "critical"}
    rule = DecisionRule(gates=(Gate(metric="critical_rate", max=0), Gate(metric="severity_rate", max=0.02)))
    d = decide(rows, rule=rule)
    assert d.non_inferiority.verdict == "better"
    assert (d.outcome, d.decided_by) == ("REJECTED", "gate critical_rate: candidate - baseline <= 0")
    [critical] = [g for g in d.gates if g.gate.metric == "critical_rate"]
    assert critical.passed is False
    assert critical.value == pytest.approx(12 / 300)
    assert (critical.candidate, critical.baseline) == (pytest.approx(12 / 300), 0.0)
    assert critical.ci_low is not None
    assert critical.ci_low > 0  # shown, not merely observed
    # The same failures on the baseline's side (pairs the candidate won because the baseline failed) cancel out.
    both = rows + [{"outcome": "candidate", "severity": "critical", "conversation_id": f"b{i}", "stratum": "s"}
                   for i in range(12)]  # fmt: skip
    [even] = [g for g in decide(both, rule=rule).gates if g.gate.metric == "critical_rate"]
    assert even.passed is True
    assert even.value == pytest.approx(0.0)
    # One critical failure is not shown to be more than noise; an absolute gate tested on the point value still
    # rejects it, for teams that want zero tolerance.
    one = verdicts(100)
    one[0] = {**one[0], "outcome": "baseline", "severity": "critical"}
    assert decide(one, rule=rule).outcome == "APPROVED"
    strict = DecisionRule(gates=(Gate(metric="critical_rate", max=0, compare="absolute", test="point"),))
    assert (decide(one, rule=strict).outcome, decide(one, rule=strict).decided_by) == (
        "REJECTED", "gate critical_rate (absolute) <= 0 (point value)")  # fmt: skip


def test_a_gate_with_no_evidence_is_not_evaluated_and_cannot_approve() -> None:
    # Rule judges give no severity: the severity gates cannot be evaluated, so APPROVED cannot rest on them.
    rows = verdicts(300, "equivalent")
    rows[0] = {**rows[0], "outcome": "baseline"}
    rule = DecisionRule(gates=(Gate(metric="critical_rate", max=0),))
    d = decide(rows, rule=rule)
    [g] = d.gates
    assert g.passed is None
    assert "no severity on any of the 1 judged losses" in str(g)
    assert (d.outcome, d.decided_by) == (
        "PARTIAL", "gate critical_rate: candidate - baseline <= 0 not evaluated (no severity on any of the 1 judged "
        "losses)")  # fmt: skip
    optional = DecisionRule(gates=(Gate(metric="critical_rate", max=0, required=False),))
    assert decide(rows, rule=optional).outcome == "APPROVED"
    # No loss at all is evidence: nothing was lost, critically or not.
    assert decide(verdicts(100, "equivalent"), rule=rule).gates[0].passed is True
    # Gates fed by replays are not evaluated without them (a bare verdicts table), and say so.
    default = decide(verdicts(100, severity="none"))
    assert {g.gate.metric for g in default.gates if g.passed is None} == {"error_rate", "latency_p95_s", "cost_ratio"}
    assert default.outcome == "PARTIAL"
    assert "not evaluated (no replays)" in default.decided_by


def test_point_and_upper_bound_tests() -> None:
    rows = verdicts(40)
    rows[0] = {**rows[0], "outcome": "baseline", "severity": "minor"}  # 1 of 120 pairs: 0.8%
    gates = [Gate(metric="severity_rate", max=0.02, test=t) for t in ("shown", "point", "upper")]
    shown, point, upper = evaluate_gates(gates, rows, {})
    assert shown.passed is True
    assert point.passed is True
    assert upper.passed is False  # with 40 conversations, 2 points is not yet shown
    assert upper.ci_high is not None
    assert upper.ci_high > 0.02
    with pytest.raises(ValueError, match="unknown gate metric 'critcal_rate'"):
        Gate(metric="critcal_rate", max=0)
    with pytest.raises(ValueError, match="not against the baseline"):
        Gate(metric="latency_p95_s", max=1, compare="baseline")


def test_side_metrics_feed_the_latency_error_and_cost_gates() -> None:
    replays = []
    for c in range(50):
        for t in range(4):
            pair = f"c{c}#{t}"
            replays.append(replay("recorded", f"c{c}", pair, latency_ms=0.0, cost_usd=None))
            replays.append(replay("baseline", f"c{c}", pair))
            slow = 40_000.0 if t == 0 and c % 4 == 0 else 2_000.0
            replays.append(replay("candidate", f"c{c}", pair, latency_ms=slow, cost_usd=0.03,
                                  text_instead_of_action=t == 1, matches_recorded=t != 1))  # fmt: skip
    sides = side_metrics(replays)
    cand = sides["candidate"]
    assert cand.text_instead_of_action_rate.value == pytest.approx(0.25)
    assert cand.matches_recorded_rate.value == pytest.approx(0.75)
    assert cand.cost_per_conversation == pytest.approx(0.12)
    d = decide(verdicts(50, per=4, severity="none"), replays)
    results = {g.gate.metric: g for g in d.gates}
    assert results["latency_p95_s"].passed is False  # 13 of 200 turns took 40 s: p95 is 40 s
    assert results["latency_p95_s"].value == pytest.approx(40.0)
    assert results["cost_ratio"].value == pytest.approx(3.0)
    assert results["cost_ratio"].passed is False
    assert (d.outcome, d.decided_by) == ("REJECTED", "gate latency_p95_s <= 30 (point value)")
    # The text-instead-of-action gate compares the sides on the same pairs: the baseline never did it.
    [text] = evaluate_gates([Gate(metric="text_instead_of_action_rate", max=0.1)], verdicts(50, per=4), sides,
                            replays=replays)  # fmt: skip
    assert (text.value, text.candidate, text.baseline) == (pytest.approx(0.25), pytest.approx(0.25), 0.0)
    assert text.passed is False
    relaxed = decide(verdicts(50, per=4), replays, DecisionRule(gates=(Gate(metric="cost_ratio", max=2.0,
                                                                           on_fail="PARTIAL"),)))  # fmt: skip
    assert (relaxed.outcome, relaxed.decided_by) == ("PARTIAL", "gate cost_ratio <= 2")
    # shown over the limit: the lower bound of the cost ratio (3x, the same on every conversation) is above it


def test_undecided_and_worse() -> None:
    mixed = [{"outcome": o, "conversation_id": f"c{i}"} for i, o in enumerate(["candidate", "baseline"] * 5)]
    d = decide(mixed, rule=DecisionRule(gates=()))
    assert (d.outcome, d.decided_by) == ("PARTIAL", "non-inferiority: undecided")
    assert decide(mixed, rule=DecisionRule(gates=(), undecided="REJECTED")).outcome == "REJECTED"
    assert decide(verdicts(60, "baseline"), rule=DecisionRule(gates=())).decided_by == "non-inferiority: worse"


def test_many_strata_are_adjusted_for_multiplicity() -> None:
    # Twenty strata where the candidate is as good as the baseline: by luck some look worse at 5% unadjusted.
    rng = np.random.default_rng(12)
    rows = [{"outcome": "candidate" if rng.random() < 0.5 else "baseline", "conversation_id": f"s{s}c{c}",
             "stratum": f"s{s:02d}"} for s in range(20) for c in range(30) for _ in range(2)]  # fmt: skip
    raw = by_stratum(rows, margin=0.0, adjustment="none")
    held = by_stratum(rows, margin=0.0, adjustment="holm")
    assert sum(s.worse for s in raw) > 0
    assert sum(s.worse for s in held) == 0
    assert all(h.p_worse_adjusted >= r.p_worse for h, r in zip(held, raw, strict=True))
    # A stratum that really is worse is still found, and makes the decision PARTIAL.
    bad = [{"outcome": "baseline", "conversation_id": f"bad{c}", "stratum": "refunds"} for c in range(40)]
    d = decide(rows + bad, rule=DecisionRule(gates=(), margin=0.05, undecided="APPROVED"))
    assert (d.outcome, d.decided_by) == ("PARTIAL", "stratum refunds: worse")


def test_a_run_decides_with_its_configured_rule(tmp_path: Path) -> None:
    from delta_eval.analysis.report import render_report
    from delta_eval.demo import demo_config, demo_conversations

    rule = DecisionRule(margin=0.05, gates=(Gate(metric="text_instead_of_action_rate", max=0.5),))
    cfg = demo_config(tmp_path / "run", n=10, latency_ms=0.0).model_copy(update={"decision": rule})
    result = de.run(cfg, conversations=demo_conversations())
    d = result.decision()
    assert d.rule == rule
    assert [g.gate.metric for g in d.gates] == ["text_instead_of_action_rate"]
    assert d.sides["candidate"].turns == result.counts.pairs
    assert f"DECISION: {d.outcome} - decided by {d.decided_by}" in render_report(result)
    assert result.decision(DecisionRule(gates=(), margin=0.4)).rule.margin == 0.4


def test_the_decision_rule_reads_from_toml(tmp_path: Path) -> None:
    config = tmp_path / "eval.toml"
    config.write_text(
        """
out = "runs/x"
[baseline]
model = "simulated:a"
[candidate]
model = "simulated:b"
[decision]
margin = 0.03
undecided = "REJECTED"
over = "judged"
gates = [{ metric = "critical_rate", max = 0 }, { metric = "latency_p95_s", max = 10, test = "upper" },
         { metric = "error_rate", max = 0.01, compare = "absolute" }]
"""
    )
    rule = de.load_config(config).decision
    assert (rule.margin, rule.undecided, rule.over, rule.weighted) == (0.03, "REJECTED", "judged", "auto")
    assert [g.label for g in rule.gates] == [
        "critical_rate: candidate - baseline <= 0",
        "latency_p95_s <= 10 (upper bound)",
        "error_rate (absolute) <= 0.01",
    ]


def test_the_rule_s_own_checks_are_reported_per_side_and_gate_relative_to_the_baseline() -> None:
    # The candidate promises refunds in 40 of 50 conversations' first turn; the baseline never does.
    replays = []
    for c in range(50):
        for t in range(2):
            pair = f"c{c}#{t}"
            promise = t == 0 and c < 40
            replays.append(replay("recorded", f"c{c}", pair, final_text="Done."))
            replays.append(replay("baseline", f"c{c}", pair, final_text="Your booking is changed."))
            said = "Refund guaranteed!" if promise else "Your booking is changed."
            replays.append(replay("candidate", f"c{c}", pair, final_text=said))
    checks = (de.Check(name="no_refund_promise", text_not_matches=r"(?i)refund guaranteed"),)
    gate = Gate(metric="check:no_refund_promise", max=0.05)
    d = decide(verdicts(50, "equivalent", per=2, severity="none"), replays, DecisionRule(checks=checks, gates=(gate,)))
    assert d.checks["candidate"]["no_refund_promise"].value == pytest.approx(0.4)
    assert d.checks["baseline"]["no_refund_promise"].value == 0.0
    [result] = d.gates
    assert (result.value, result.candidate, result.baseline) == (pytest.approx(0.4), pytest.approx(0.4), 0.0)
    assert (d.outcome, d.decided_by) == ("REJECTED", "gate check:no_refund_promise: candidate - baseline <= 0.05")
    assert "check no_refund_promise: fails 40.0%" in "\n".join(d.lines())
    missing = decide(verdicts(50, "equivalent", per=2), replays, DecisionRule(gates=(gate,)))
    assert missing.gates[0].passed is None
    assert "no check named 'no_refund_promise'" in missing.gates[0].detail


def test_judge_failures_are_gated_by_default_and_the_margin_s_scale_is_stated() -> None:
    # 10% of the pairs could not be decided by any judge: left out of the win rate, but gated (PARTIAL).
    rows = verdicts(100, "equivalent", severity="none")
    for k in range(0, 300, 10):
        rows[k] = {**rows[k], "outcome": "error", "stage": "error", "error_side": "judge", "error": "no judge"}
    assert any(g.metric == "undecided_rate" for g in DecisionRule().gates)
    gates = tuple(g for g in DecisionRule().gates if g.metric == "undecided_rate")
    d = decide(rows, rule=DecisionRule(gates=gates))
    assert (d.outcome, d.decided_by) == ("PARTIAL", "gate undecided_rate <= 0.05")
    assert d.non_inferiority.win_rate.errors == 30
    assert d.non_inferiority.win_rate.errors_counted == 0
    assert "non-inferior above 48.0%, a margin of 2 points on this scale" in "\n".join(d.lines())


def test_latencies_are_listed_in_increasing_order_whatever_order_the_rows_come_in() -> None:
    rng = np.random.default_rng(3)
    replays = [replay(side, f"c{c}", f"c{c}#{t}", latency_ms=float(rng.integers(100, 5000)))
               for c in range(20) for t in range(3) for side in ("baseline", "candidate")]  # fmt: skip
    shuffled = [replays[i] for i in rng.permutation(len(replays))]
    import pyarrow as pa

    for rows in (replays, shuffled):
        for sides in (side_metrics(rows), decide(verdicts(20), pa.Table.from_pylist(rows)).sides):
            for side in ("baseline", "candidate"):
                own = sorted(float(r["latency_ms"]) for r in replays if r["side"] == side)  # type: ignore[arg-type]
                assert sides[side].latencies_ms == own


def test_the_cost_ratio_is_the_clustered_mean_of_each_conversations_ratio() -> None:
    """On the conversations both sides priced (names of any script, in any order; unpriced, free and missing ones
    left out), to the last bit."""
    from delta_eval.metrics.intervals import clustered_mean, t_interval
    from delta_eval.metrics.sides import Rate, SideMetrics, cost_ratio

    rng = np.random.default_rng(5)
    unknown = Rate(value=None, ci_low=0.0, ci_high=1.0, numerator=0.0, n=0.0)
    names = [f"{rng.choice(['c', 'é', '日本', 'Z', 'a b'])}{i}" for i in rng.permutation(400)]

    def side(costs: dict[str, float | None]) -> SideMetrics:
        return SideMetrics(side="x", turns=1, conversations=len(costs), error_rate=unknown,
                           invalid_tool_call_rate=unknown, matches_recorded_rate=unknown,
                           text_instead_of_action_rate=unknown, no_decision_rate=unknown, latency_p50_ms=None,
                           latency_p95_ms=None, latency_p95_ci_ms=None, cost_per_conversation=None,
                           costs_by_conversation=costs)  # fmt: skip

    def cost() -> float | None:
        return [None, 0.0, float(rng.random()), float(rng.random()) * 1e-3][int(rng.integers(4))]

    cand = {n: cost() for n in names}
    base = {n: cost() for n in reversed(names) if rng.random() < 0.9}
    both = [n for n, v in cand.items() if v is not None and base.get(n) is not None]
    x = np.array([base[n] for n in both])
    y = np.array([cand[n] for n in both])
    keep = x > 0
    ratios, weights = y[keep] / x[keep], x[keep]
    # The conversations summed in an order of their own (by ratio, then weight), not of their names.
    rank = np.empty(len(ratios), dtype=int)
    rank[np.lexsort((weights, ratios))] = np.arange(len(ratios))
    mean = clustered_mean(ratios, weights=weights, clusters=[f"{r:06d}" for r in rank])
    lo, hi = t_interval(mean, 0.95, lower=0.0, upper=float("inf"))
    got = cost_ratio(side(cand), side(base))
    assert (got.value, got.ci_low, got.ci_high) == (mean.estimate, lo, hi)
    assert (got.numerator, got.n) == (math.fsum(y), math.fsum(x))
    by_name = clustered_mean(ratios, weights=weights, clusters=np.asarray(both)[keep])
    assert got.value == pytest.approx(by_name.estimate, rel=1e-12)
    # The same conversations in another order (a resumed run's files, keys instead of names): the same bits.
    assert cost_ratio(side(dict(reversed(cand.items()))), side(dict(reversed(base.items())))) == got


def test_replays_without_a_conversation_column_are_one_conversation_on_both_paths() -> None:
    """Rows with no ``conversation_id`` at all read as a missing one (``"None"``), as DuckDB's view of the same
    table reads the column it lacks as nulls: one conversation, not a KeyError."""
    import duckdb
    import pyarrow as pa

    from delta_eval.metrics.decision_sql import Source, side_metrics_of

    rows = [{"pair_id": f"p{i}", "side": side, "latency_ms": 100.0 + i, "cost_usd": 0.5, "n_tool_calls": 1}
            for i in range(3) for side in ("baseline", "candidate")]  # fmt: skip
    mine = side_metrics(rows)
    assert {side: m.conversations for side, m in mine.items()} == {"baseline": 1, "candidate": 1}
    assert mine["candidate"].costs_by_conversation == {"None": 1.5}
    with duckdb.connect() as db:
        db.register("v", pa.table({"pair_id": [f"p{i}" for i in range(3)]}))
        db.register("r", pa.Table.from_pylist(rows))
        src = Source(db, "v", "r")
        sql = side_metrics_of(src)
        src.close()
    assert {side: m.model_dump() for side, m in sql.items()} == {side: m.model_dump() for side, m in mine.items()}
