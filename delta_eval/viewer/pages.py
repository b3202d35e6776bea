"""What the viewer's pages show, computed from the queries' rows: the decision with a pair-list link behind each
gate and test, and a pair laid out in rounds with the two sides' differences marked.

Nothing here writes HTML: the templates do, with autoescaping, so model output is always shown as text.

Example:
    >>> gate_query("critical_rate")
    'severity=critical'
    >>> gate_query("check:polite") is None
    True
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from delta_eval.metrics import Decision
from delta_eval.schema import Message, Replay, Step, ToolCall, ToolResult
from delta_eval.viewer.diff import Segment, json_diff, pretty_json, word_diff

__all__ = ["CallView", "RoundView", "decision_view", "gate_query", "message_view", "rounds"]

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


@dataclass
class CallView:
    """One tool call of a round on one side: its name, its arguments (diffed against the other side's call at the
    same place) and its result."""

    name: str
    arguments: list[Segment]
    result: str | None = None
    source: str | None = None
    valid: bool = True


@dataclass
class RoundView:
    """One round of a turn: what each side said and called at this step (``None``: the side had no such step)."""

    index: int
    text: dict[str, list[Segment] | None] = field(default_factory=dict)
    calls: dict[str, list[CallView]] = field(default_factory=dict)
    reasoning: dict[str, str | None] = field(default_factory=dict)


def _plain(text: str | None) -> list[Segment] | None:
    return [Segment(text, "same")] if text else None


def _result_of(call: ToolCall, results: tuple[ToolResult, ...]) -> ToolResult | None:
    return next((r for r in results if r.call_id == call.id), None)


def _calls(step: Step | None, other: Step | None, left: bool) -> list[CallView]:
    if step is None:
        return []
    out = []
    for i, call in enumerate(step.tool_calls):
        twin = other.tool_calls[i] if other is not None and i < len(other.tool_calls) else None
        if twin is None:
            arguments = [Segment(pretty_json(call.arguments), "same")]
        else:
            a, b = json_diff(call.arguments, twin.arguments) if left else json_diff(twin.arguments, call.arguments)
            arguments = a if left else b
            if twin.name != call.name:  # another tool: the whole call differs
                arguments = [Segment(pretty_json(call.arguments), "del" if left else "ins")]
        result = _result_of(call, step.tool_results)
        out.append(
            CallView(
                name=call.name,
                arguments=arguments,
                result=pretty_json(result.content) if result else None,
                source=result.source if result else None,
                valid=call.arguments_valid is not False,
            )
        )
    return out


def rounds(sides: dict[str, Replay]) -> list[RoundView]:
    """Each side's turn in rounds (one step a round: text, tool calls and their results), the baseline's and the
    candidate's texts and arguments diffed; the final text is the last round."""
    steps = {side: list(r.output.steps) for side, r in sides.items()}
    n = max((len(s) for s in steps.values()), default=0)
    out: list[RoundView] = []
    for k in range(n):
        at = {side: (s[k] if k < len(s) else None) for side, s in steps.items()}
        b, c = at.get("baseline"), at.get("candidate")
        view = RoundView(index=k + 1)
        if b is not None and c is not None and (b.text or c.text):
            view.text["baseline"], view.text["candidate"] = word_diff(b.text, c.text)
        for side, step in at.items():
            if side not in view.text:
                view.text[side] = _plain(step.text) if step else None
            view.reasoning[side] = step.reasoning if step else None
        view.calls["baseline"] = _calls(b, c, left=True)
        view.calls["candidate"] = _calls(c, b, left=False)
        if "recorded" in at:
            view.calls["recorded"] = _calls(at["recorded"], None, left=True)
        out.append(view)
    finals = {side: r.output.final_text for side, r in sides.items()}
    if any(finals.values()):
        view = RoundView(index=n + 1)
        fb, fc = finals.get("baseline"), finals.get("candidate")
        if "baseline" in finals and "candidate" in finals:
            view.text["baseline"], view.text["candidate"] = word_diff(fb, fc)
        for side, text in finals.items():
            view.text.setdefault(side, _plain(text))
            view.reasoning[side] = sides[side].output.final_reasoning
            view.calls[side] = []
        out.append(view)
    return out


def message_view(m: Message) -> dict[str, Any]:
    """A message of the conversation so far, for the template."""
    return {
        "role": m.role,
        "content": m.content or "",
        "name": m.name,
        "calls": [(c.name, pretty_json(c.arguments)) for c in m.tool_calls],
    }
