"""The pairs behind each line of a decision: every gate and test, and each stratum, with the pair-list query
(:class:`~delta_eval.analysis.pair_filter.PairFilter`'s URL form) that shows the pairs it rests on. The viewer links
each line to its pairs; the static report lists them under the line.

Example:
    >>> gate_query("critical_rate")
    'severity=critical'
    >>> gate_query("check:polite") is None
    True
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from delta_eval.metrics import Decision

__all__ = ["decision_view", "gate_query"]

#: The pairs behind each gate's metric, as a pair-list query (``None``: a gate no pair filter shows, e.g. a user's
#: own check). Rates of failures list the pairs that show the failure; latency and cost sort by the candidate's.
_GATE_QUERIES: dict[str, str] = {
    "critical_rate": "severity=critical",
    "severity_rate": "severity=minor&severity=critical",
    "error_rate": "flag=replay_error",
    "undecided_rate": "failed=judge",
    "invalid_tool_call_rate": "flag=invalid_tool_calls",
    "text_instead_of_action_rate": "flag=text_instead_of_action",
    "no_decision_rate": "flag=no_decision",
    "latency_p95_s": "sort=candidate_latency&dir=desc",
    "cost_ratio": "sort=candidate_cost&dir=desc",
}


def gate_query(metric: str) -> str | None:
    """The pair-list query that shows the pairs behind a gate's ``metric``."""
    return _GATE_QUERIES.get(metric)


def decision_view(d: Decision) -> dict[str, Any]:
    """The decision as the run page shows it: each line with the pair-list query behind it."""
    ni, net, st = d.non_inferiority, d.net_preference, d.sign_test
    tests: list[tuple[str, list[tuple[str, str]]]] = [
        (f"non-inferiority: {ni}", [("pairs the baseline won", "outcome=baseline"),
                                    ("pairs the candidate won", "outcome=candidate")]),
        (
            f"sign test over conversations: {st.favour_candidate} favour the candidate, {st.favour_baseline} the "
            f"baseline, {st.balanced} in balance; p = {st.p_value:.3g}",
            [("judged pairs", "stage=judge")],
        ),
    ]  # fmt: skip
    if net.estimate is not None:
        said = f"net preference {net.estimate:+.1%} [{net.ci_low:+.1%}, {net.ci_high:+.1%}]"
        tests.insert(1, (said, [("sorted by preference", "stage=judge&sort=preference")]))
    if d.audit.get("audited"):
        a = d.audit
        said = (
            f"stage-2 audit: {a['audited']} of {a['stage2']} pairs stage 2 found equivalent were judged again; "
            f"{a['different']} judged different"
        )
        tests.append((said, [("stage-2 pairs", "stage=equivalence")]))
    gates = [
        {"text": str(g), "passed": g.passed, "query": gate_query(g.gate.metric), "metric": g.gate.metric}
        for g in d.gates
    ]
    strata = [
        {
            "name": s.stratum,
            "verdict": str(s.verdict),
            "estimate": s.win_rate.estimate,
            "ci": (s.win_rate.ci_low, s.win_rate.ci_high),
            "worse": s.worse,
            "small": s.small,
            "query": urlencode({"stratum": s.stratum}),
        }
        for s in d.strata
    ]
    return {
        "outcome": d.outcome,
        "decided_by": d.decided_by,
        "estimand": d.estimand,
        "tests": tests,
        "gates": gates,
        "strata": strata,
        "sides": {side: m.summary() for side, m in d.sides.items()},
    }
