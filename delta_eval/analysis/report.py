"""The plain-text report of a run: what was read, sampled and replayed, what each stage decided, the win rate with
its interval overall and per stratum, cost and latency per side, and the errors.

Every figure comes from the run folder, so the same numbers can be re-derived with SQL through ``open_run``.
"""

from __future__ import annotations

from statistics import median
from typing import Any

from delta_eval.metrics import WinRate
from delta_eval.pricing import total_cost
from delta_eval.result import RunResult

__all__ = ["render_report", "simulated_parts"]


def simulated_parts(result: RunResult) -> list[str]:
    """Which parts of the run were stand-ins (simulated models, rule-based judges), for the report to say so."""
    m = result.manifest
    parts = [
        f"{side} model ({model})"
        for side, model in (("baseline", m.baseline_model), ("candidate", m.candidate_model))
        if model.startswith("simulated:")
    ]
    judges = (("stage-2 equivalence judge", m.equivalence_judge), ("stage-3 judge", m.judge))
    parts += [f"{label} (rule-based)" for label, name in judges if name is not None and name.startswith("rule")]
    return parts


def _pct(w: WinRate) -> str:
    if w.estimate is None:
        return "n/a"
    return f"{w.estimate:6.1%}  [{w.ci_low:.1%}, {w.ci_high:.1%}]"


def _side_stats(con: Any) -> list[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = con.execute(
        """
        SELECT side, model, count(*) AS replays, sum(model_calls) AS calls, sum(cached_calls) AS cached,
               sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens, list(cost_usd) AS costs,
               list(latency_ms) FILTER (WHERE error IS NULL) AS latencies,
               count(*) FILTER (WHERE hit_tool_cap) AS capped, count(*) FILTER (WHERE error IS NOT NULL) AS failed
        FROM replays WHERE side <> 'recorded' GROUP BY side, model ORDER BY side
        """
    ).fetchall()
    return rows


def render_report(result: RunResult, *, by_stratum: bool = True) -> str:
    """The report as text."""
    m = result.manifest
    counts = result.counts
    lines: list[str] = []
    stand_ins = simulated_parts(result)
    if stand_ins:
        lines.append("NOTE: simulated run - " + ", ".join(stand_ins) + " are stand-ins; no real model was called.")
        lines.append("      The numbers show the pipeline working, not the quality of any real model.")
        lines.append("")
    if m.description:
        lines.append(m.description)
        lines.append("")
    lines.append(f"run folder   {result.path}   ({result.status})")
    lines.append(f"baseline     {m.baseline}")
    lines.append(f"candidate    {m.candidate}")
    lines.append(f"source       {m.source}")
    lines.append("")
    lines.append(
        f"conversations  read {counts.read} ({counts.read_errors} bad records), population {counts.population}"
        + (f" ({counts.excluded_by_where} left out by 'where')" if counts.excluded_by_where else "")
        + f", sampled {counts.sampled}"
    )
    by_stage = counts.by_stage
    lines.append(
        f"pairs          replayed and decided {counts.pairs} (planned {counts.pairs_planned}), "
        f"from {counts.conversations_replayed} conversations"
    )
    lines.append(
        f"  stage 1 deterministic equivalent  {by_stage.get('deterministic', 0):6d}\n"
        f"  stage 2 equivalence judge         {by_stage.get('equivalence', 0):6d}\n"
        f"  stage 3 judge                     {by_stage.get('judge', 0):6d}\n"
        f"  error (no verdict)                {by_stage.get('error', 0):6d}"
    )
    outcomes = counts.by_outcome
    lines.append(
        f"  judge outcomes: candidate {outcomes.get('candidate', 0)}, baseline {outcomes.get('baseline', 0)}, "
        f"tie {outcomes.get('tie', 0)}"
    )
    lines.append("")
    everything = result.win_rate(over="all")
    judged = result.win_rate(over="judged")
    weighted = result.win_rate(over="all", weighted=True)
    lines.append("win rate of the candidate = (wins + ties/2) / pairs, 95% CI")
    lines.append(f"  all pairs (equivalent = tie)      {_pct(everything)}  Wilson, n={everything.pairs}")
    lines.append(f"  judged pairs only                 {_pct(judged)}  Wilson, n={judged.pairs}")
    lines.append(f"  all pairs, population-weighted    {_pct(weighted)}  cluster bootstrap by conversation")
    if by_stratum:
        strata = result.win_rate(over="all", by="stratum")
        if len(strata) > 1:
            lines.append("  by stratum (all pairs):")
            for w in strata:
                lines.append(f"    {w.stratum or '(none)':45s} {_pct(w)}  n={w.pairs}")
    lines.append("")
    con = result.connect()
    try:
        lines.append("per side      replays  calls (cached)   tokens in/out      cost USD   latency p50/p90 ms  capped")
        for side, _model, n, calls, cached, tin, tout, costs, lat, capped, failed in _side_stats(con):
            lat = sorted(lat or [])
            p50 = median(lat) if lat else 0.0
            p90 = lat[int(0.9 * (len(lat) - 1))] if lat else 0.0
            cost = total_cost(costs)
            cost_s = f"{cost:10.4f}" if cost is not None else "   unknown"
            lines.append(
                f"  {side:10s} {n:8d} {calls:6d} ({cached:6d}) {tin:10d}/{tout:<8d} {cost_s} "
                f"{p50:9.1f}/{p90:<9.1f} {capped:6d}" + (f"  failed {failed}" if failed else "")
            )
        errors = con.execute("SELECT stage, count(*) FROM errors GROUP BY stage ORDER BY stage").fetchall()
    finally:
        con.close()
    lines.append("")
    calls = counts.calls
    lines.append(
        f"model calls    answered {calls.answered} ({calls.made} attempts, {calls.retries} retried, "
        f"{calls.rate_limited} rate-limited), from cache {calls.cached}; {len(m.sessions)} session(s)"
    )
    if len(m.sessions) > 1:
        for k, s in enumerate(m.sessions, start=1):
            said = f"{s.answered} answered, {s.cache.hits if s.cache else 0} from cache" if s.calls else "no record"
            lines.append(
                f"  session {k}: {s.status:11s} resumed {s.resumed_pairs} pairs, "
                f"{s.cached_responses_at_start} responses already cached, {said}"
            )
    for k, note in enumerate(m.notes):
        lines.append(("notes          " if k == 0 else "               ") + note)
    if errors:
        lines.append("errors         " + ", ".join(f"{stage} {n}" for stage, n in errors) + "  (see the errors table)")
    else:
        lines.append("errors         none")
    lines.append("")
    views = "replays, verdicts, judgements, pairs, errors, ..."
    lines.append(f"explore: delta_eval.open_run({str(result.path)!r})  ->  views {views}")
    return "\n".join(lines)
