"""The plain-text report of a run: what was read, sampled and replayed; the judging funnel (pairs, judge calls,
tokens, cost and latency per stage); how far the judges can be trusted (position consistency, the audit of stage 2,
self-preference); the win rate with its interval overall and per stratum, beside an A/A run's as the noise floor;
cost and latency per side; and the errors.

Every figure comes from the run folder, so the same numbers can be re-derived with SQL through ``open_run``.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from statistics import median
from typing import Any

from delta_eval.analysis.spend import side_spend, spend_lines
from delta_eval.exceptions import RunFolderError, RunFolderWarning
from delta_eval.metrics import WinRate, wilson_interval
from delta_eval.pricing import total_cost
from delta_eval.result import RunResult
from delta_eval.store.folder import damage_message
from delta_eval.store.manifest import RunManifest, StageSpend
from delta_eval.uris import is_uri, shown

__all__ = [
    "funnel_lines",
    "judge_check_lines",
    "model_family",
    "render_report",
    "run_cost",
    "self_preference_warnings",
    "simulated_parts",
    "simulator_lines",
]


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
    labels = {"equivalence": "stage-2 equivalence judge", "judge": "stage-3 judge"}
    parts += [
        f"{labels.get(stage, stage)} ({model})"
        for stage, models in m.judge_models.items()
        for model in models
        if model.startswith("simulated:")
    ]
    return parts


#: Model-id prefixes of the same vendor's models, for the self-preference warning.
_FAMILIES = {"openai-responses": "openai", "azure": "openai", "azure-responses": "openai", "vertex": "gemini"}


def model_family(model: str) -> str:
    """The vendor family of a model id, as far as self-preference goes (GPT, Claude, Gemini, ...).

    Example:
        >>> model_family("openai-responses:gpt-5"), model_family("anthropic:claude-sonnet-4-5")
        ('openai', 'anthropic')
    """
    prefix = model.split(":", 1)[0] if ":" in model else model
    return _FAMILIES.get(prefix, prefix)


def self_preference_warnings(manifest: RunManifest) -> list[str]:
    """A warning for each LLM judge of the same model family as a side: judges tend to prefer outputs of their own
    family (self-preference), so such a verdict leans towards that side. Simulated models have no family."""
    sides = {"baseline": manifest.baseline_model, "candidate": manifest.candidate_model}
    out = []
    for stage, models in manifest.judge_models.items():
        for model in models:
            if model_family(model) == "simulated":
                continue
            same = [side for side, m in sides.items() if m and model_family(m) == model_family(model)]
            if same:
                out.append(
                    f"self-preference: the {'stage-2' if stage == 'equivalence' else 'stage-3'} judge {model} is of "
                    f"the same model family ({model_family(model)}) as the {' and the '.join(same)}; LLM judges tend "
                    f"to prefer their own family's outputs"
                )
    return out


def _pct(w: WinRate) -> str:
    if w.estimate is None:
        return "n/a"
    return f"{w.estimate:6.1%}  [{w.ci_low:.1%}, {w.ci_high:.1%}]"


def _rate(k: int, n: int) -> str:
    if n == 0:
        return "n/a"
    lo, hi = wilson_interval(k / n, n)
    return f"{k / n:.1%} [{lo:.1%}, {hi:.1%}]"


def _money(value: float | None) -> str:
    return f"{value:10.4f}" if value is not None else "   unknown"


def _tokens(value: int | None, width: int) -> str:
    # Right-aligned for a positive width, left for a negative one; "unknown" where a call reported no usage.
    text = str(value) if value is not None else "unknown"
    return f"{text:>{width}s}" if width > 0 else f"{text:<{-width}s}"


def funnel_lines(result: RunResult, con: Any) -> list[str]:
    """The judging funnel: per stage, the pairs that reached it and those it decided, the judge calls it made and
    what they used; then how many pairs stages 1 and 2 resolved before stage 3."""
    counts = result.counts
    by_stage = counts.by_stage
    failed_replays = con.execute(
        "SELECT count(DISTINCT pair_id) FROM replays WHERE side <> 'recorded' AND error IS NOT NULL"
    ).fetchone()[0]
    entered = counts.pairs - failed_replays
    spend = counts.judging
    eq, judge, audit = (spend.get(k, StageSpend()) for k in ("equivalence", "judge", "audit"))
    lines = ["judging funnel      pairs in  decided   calls (failed)  tokens in/out           cost USD  p50 ms/call"]

    def row(label: str, pairs_in: int, decided: str, s: StageSpend | None) -> str:
        if s is None or s.calls == 0:
            return f"  {label:18s} {pairs_in:8d} {decided:>8s}"
        p50 = f"{s.latency_ms_p50:11.1f}" if s.latency_ms_p50 is not None else "        n/a"
        return (
            f"  {label:18s} {pairs_in:8d} {decided:>8s} {s.calls:8d} ({s.failed:4d})  "
            f"{_tokens(s.input_tokens, 10)}/{_tokens(s.output_tokens, -10)} {_money(s.cost_usd)} {p50}"
        )

    lines.append(row("1 deterministic", entered, str(by_stage.get("deterministic", 0)), None))
    if result.manifest.equivalence_judge is not None:
        lines.append(row("2 equivalence", eq.pairs, str(by_stage.get("equivalence", 0)), eq))
    lines.append(row("3 judge", judge.pairs, str(by_stage.get("judge", 0)), judge))
    if audit.calls:
        lines.append(row("  audit of stage 2", audit.pairs, "-", audit))
    if failed_replays:
        lines.append(f"  {'replay failed':18s} {failed_replays:8d}")
    before = by_stage.get("deterministic", 0) + by_stage.get("equivalence", 0)
    if entered:
        lines.append(f"  stages 1+2 resolved {before} of {entered} pairs ({before / entered:.1%}) before stage 3")
    costs = [s.cost_usd for s in (eq, judge, audit) if s.calls]
    if costs:
        total = total_cost(costs)
        lines.append(f"  judge cost         {'unknown' if total is None else f'{total:.4f} USD'}")
    return lines


#: The report's (and a cost estimate's) name of each session simulator's part.
SIMULATOR_PARTS = {"user_simulator": "user simulator", "tool_simulator": "tool simulator"}


def simulator_lines(result: RunResult) -> list[str]:
    """What a session run's simulators used, per role: the sessions they served, their calls (as the provider
    answered them: both sides asking the same question were answered by one call and the cache), tokens, dollars
    and latency. Nothing for a run without them."""
    spend = result.counts.simulating
    if not spend:
        return []
    lines = ["session simulators  sessions    calls  tokens in/out           cost USD  p50 ms/call"]
    for role, s in spend.items():
        p50 = f"{s.latency_ms_p50:11.1f}" if s.latency_ms_p50 is not None else "        n/a"
        lines.append(
            f"  {SIMULATOR_PARTS.get(role, role):18s} {s.pairs:8d} {s.calls:8d}  "
            f"{_tokens(s.input_tokens, 10)}/{_tokens(s.output_tokens, -10)} {_money(s.cost_usd)} {p50}"
        )
    total = total_cost(s.cost_usd for s in spend.values())
    lines.append(f"  simulator cost     {'unknown' if total is None else f'{total:.4f} USD'}")
    return lines


def run_cost(result: RunResult, con: Any) -> float | None:
    """What the whole run cost: both sides' replays, every judge call, and a session run's simulators (``None``
    when some call's price or usage is unknown)."""
    spent = actual_spend(result, con)
    # A rule-based judge calls no model: it has no part here, and costs nothing.
    return total_cost(cost for cost, _ in spent.values())


def actual_spend(result: RunResult, con: Any) -> dict[str, tuple[float | None, int | None]]:
    """What the run cost and its input tokens, by the parts a cost estimate names: each side's replays, stage 2's
    and stage 3's calls (the audit of stage 2 with stage 3), and a session run's simulators. ``None`` where a call's
    price or usage is unknown."""
    rows = con.execute(
        """
        SELECT side, list(cost_usd), CASE WHEN count(input_tokens) = count(*) THEN sum(input_tokens) END
        FROM replays WHERE side <> 'recorded' GROUP BY side ORDER BY side
        """
    ).fetchall()
    spent: dict[str, tuple[float | None, int | None]] = {side: (total_cost(c), n) for side, c, n in rows}
    judging = result.counts.judging
    if "equivalence" in judging:
        spent["stage 2 equivalence"] = (judging["equivalence"].cost_usd, judging["equivalence"].input_tokens)
    stage3 = [judging[k] for k in ("judge", "audit") if k in judging]
    if stage3:
        tokens = [s.input_tokens for s in stage3]
        known = None if None in tokens else sum(t for t in tokens if t is not None)
        spent["stage 3 judge"] = (total_cost(s.cost_usd for s in stage3), known)
    for role, sim in result.counts.simulating.items():
        spent[SIMULATOR_PARTS.get(role, role)] = (sim.cost_usd, sim.input_tokens)
    return spent


def estimate_lines(result: RunResult, con: Any) -> list[str]:
    """The cost estimate made when the run began beside what the run cost and the input tokens it used, per part
    and in total (nothing when the run kept no estimate)."""
    est = result.manifest.estimate
    if not est:
        return []
    actual = actual_spend(result, con)
    lines = [
        "",
        "cost estimate vs actual  estimate USD (range)               actual USD    gap   tokens in est/actual",
    ]

    def gap(point: float | None, act: float | None) -> str:
        return f"{(point - act) / act:+.0%}" if point is not None and act else "n/a"

    def row(name: str, part: dict[str, Any], act: tuple[float | None, int | None]) -> str:
        low, high = part.get("low_usd"), part.get("high_usd")
        rng = f"({low:.4f}-{high:.4f})" if low is not None and high is not None else "(unknown)"
        tokens = part.get("input_tokens")
        tin = f"{tokens:,.0f}" if tokens is not None else "?"
        tact = f"{act[1]:,}" if act[1] is not None else "unknown"
        point = part.get("cost_usd")
        return (
            f"  {name:22s} {_money(point)} {rng:23s} {_money(act[0])} {gap(point, act[0]):>6s}"
            f"   {tin}/{tact} ({gap(tokens, act[1])})"
        )

    parts = est.get("parts", [])
    for part in parts:
        lines.append(row(part["part"], part, actual.get(part["part"], (0.0, 0))))
    # Judge stages the estimate has no part for (rule judges) cost nothing, so the total compares like with like.
    spent = [actual.get(part["part"], (0.0, 0)) for part in parts]
    costs, tokens = total_cost(c for c, _ in spent), [t for _, t in spent]
    total_tokens = None if None in tokens else sum(t for t in tokens if t is not None)
    est_tokens = sum(part.get("input_tokens") or 0 for part in parts)
    whole = {"cost_usd": est.get("total_usd"), "low_usd": est.get("low_usd"), "high_usd": est.get("high_usd"),
             "input_tokens": est_tokens}  # fmt: skip
    lines.append(row("total", whole, (costs, total_tokens)))
    if result.counts.pairs < est.get("pairs", 0):
        lines.append(f"  (the run decided {result.counts.pairs} of the {est['pairs']} pairs the estimate covers)")
    return lines


def judge_check_lines(result: RunResult) -> list[str]:
    """How far the judges can be trusted on this run: position consistency, the audit of stage 2, self-preference."""
    counts, m = result.counts, result.manifest
    lines = []
    if counts.orders_compared:
        rule = m.config.get("judges", {}).get("disagreement", "tie")
        how = "counted as a tie" if rule == "tie" else "counted as the mean of the two preferences"
        lines.append(
            f"  position bias: {counts.orders_compared} pairs judged in both orders, orders disagreed on "
            f"{counts.orders_disagree}: {_rate(counts.orders_disagree, counts.orders_compared)} ({how})"
        )
    if counts.one_order:
        lines.append(
            f"  one order only: {counts.one_order} pairs meant to be judged both ways were answered in one order "
            "(the other call failed); their verdicts rest on that order and are labelled with it"
        )
    if counts.audited:
        rate = _rate(counts.audit_found_difference, counts.audited)
        lines.append(
            f"  stage-2 audit: {counts.audited} 'equivalent' pairs re-judged by stage 3, which preferred a side on "
            f"{counts.audit_found_difference}: false-equivalence rate {rate}"
        )
    elif counts.by_stage.get("equivalence"):
        lines.append("  stage-2 audit: none drawn (audit_fraction is 0, or too few pairs); stage 2 is unchecked")
    lines += [f"  WARNING {w}" for w in self_preference_warnings(m)]
    return ["judge checks", *lines] if lines else []


def _side_stats(con: Any) -> list[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = con.execute(
        """
        SELECT side, model, count(*) AS replays, sum(model_calls) AS calls, sum(cached_calls) AS cached,
               -- null (unknown) as soon as one replay reported no usage: never a partial sum
               CASE WHEN count(input_tokens) = count(*) THEN sum(input_tokens) END AS input_tokens,
               CASE WHEN count(output_tokens) = count(*) THEN sum(output_tokens) END AS output_tokens,
               list(cost_usd) AS costs,
               list(latency_ms) FILTER (WHERE error IS NULL) AS latencies,
               count(*) FILTER (WHERE hit_tool_cap) AS capped, count(*) FILTER (WHERE error IS NOT NULL) AS failed,
               -- no decision, from the output itself so that runs written before the no_decision column count too
               count(*) FILTER (WHERE error IS NULL AND n_tool_calls = 0 AND trim(coalesce(final_text, '')) = '')
                   AS silent
        FROM replays WHERE side <> 'recorded' GROUP BY side, model ORDER BY side
        """
    ).fetchall()
    return rows


def _noise_floor(result: RunResult, path: str | Path | None) -> dict[str, Any]:
    where = path if path is not None else result.manifest.noise_floor
    if where is None:
        return {}
    try:
        aa = RunResult(where)
    except RunFolderError as exc:
        raise RunFolderError(f"noise floor: {exc}") from None
    return {
        "path": shown(str(where)) if is_uri(where) else str(where),
        "all": aa.win_rate(over="all"),
        "judged": aa.win_rate(over="judged"),
    }


def render_report(result: RunResult, *, by_stratum: bool = True, noise_floor: str | Path | None = None) -> str:
    """The report as text. ``noise_floor`` is an A/A run folder whose win rate is printed beside this run's
    (default: the one the run was configured with, if any)."""
    with warnings.catch_warnings():  # the damage is named in the report itself
        warnings.simplefilter("ignore", RunFolderWarning)
        text = _render(result, by_stratum=by_stratum, noise_floor=noise_floor)
        if not result.candidates:
            return text
        # A run of several candidates: how they rank, then this candidate's report as if it ran alone.
        from delta_eval.analysis.leaderboard import leaderboard

        board = leaderboard(result.path)  # with the score the run was configured with
        others = [c for c in result.candidates if c != result.candidate]
        head = f"== candidate {result.candidate} against the baseline (the others: --candidate {', '.join(others)}) =="
        return f"{board}\n\n{head}\n{text}"


def _render(result: RunResult, *, by_stratum: bool, noise_floor: str | Path | None) -> str:
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
    if m.status == "failed" and m.failure:
        lines += [f"FAILED: {m.failure}", ""]
    if result.damage:
        lines += ["DAMAGED: " + damage_message(result.path, result.damage), ""]
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
    if m.stopped_early:
        lines.append(f"STOPPED EARLY: {m.stopped_early}; {counts.pairs} of {counts.pairs_planned} planned pairs done")
    lines.append(
        f"pairs          replayed and decided {counts.pairs} (planned {counts.pairs_planned}), "
        f"from {counts.conversations_replayed} conversations"
        + (
            f"; {counts.greetings_skipped} greeting turns left out (plain text before the first user message; "
            "replay_greetings replays them)"
            if counts.greetings_skipped
            else ""
        )
    )
    # A stratum whose conversations have nothing to replay is in no win rate and no decision: say so, by name.
    lines += [
        f"  WARNING stratum {h}: no pairs ({why}); it is in no win rate and no decision"
        for h, why in counts.strata_without_pairs.items()
    ]
    out = counts.by_outcome
    lines.append(
        f"  decided by: stage 1 {by_stage.get('deterministic', 0)}, stage 2 {by_stage.get('equivalence', 0)}, "
        f"stage 3 {by_stage.get('judge', 0)}, error (no verdict) {by_stage.get('error', 0)}; judge outcomes: "
        f"candidate {out.get('candidate', 0)}, baseline {out.get('baseline', 0)}, tie {out.get('tie', 0)}"
    )
    lines.append("")
    con = result.connect()
    try:
        lines += funnel_lines(result, con)
    finally:
        con.close()
    simulators = simulator_lines(result)
    if simulators:
        lines += ["", *simulators]
    checks = judge_check_lines(result)
    if checks:
        lines += ["", *checks]
    lines.append("")
    floor = _noise_floor(result, noise_floor)
    decision = result.decision()
    rule = decision.rule
    everything = result.win_rate(over="all", errors=rule.errors)
    judged = result.win_rate(over="judged", errors=rule.errors)
    soft = result.win_rate(over="judged", soft=True, errors=rule.errors)
    per_turn = result.win_rate(over="all", method="wilson", errors=rule.errors)
    lines.append("win rate of the candidate = (wins + ties/2) / pairs, 95% CI; intervals treat a conversation's turns")
    lines.append("as one cluster (each side's wins get a Wilson interval at its design-effect size, t quantile, and")
    lines.append("the two are combined by MOVER); a failed replay is a loss of the side that failed")
    aa = {k: f"   A/A noise floor {_pct(floor[k])}" for k in ("all", "judged") if k in floor}
    weighted_note = ", population-weighted" if everything.weighted else ""
    decides = {"all": "", "judged": "", "soft": ""}
    decides["soft" if rule.soft else rule.over] = "   <- the decision's estimate"
    rows = [
        (f"all pairs (equivalent = tie{weighted_note})", everything,
         f"n={everything.pairs} pairs / {everything.clusters} conversations{aa.get('all', '')}{decides['all']}"),
        (f"judged pairs only{weighted_note}", judged, f"n={judged.pairs}{aa.get('judged', '')}{decides['judged']}"),
    ]  # fmt: skip
    if soft.pairs and soft.estimate != judged.estimate:
        rows.append(("judged, soft (mean preference)", soft, f"the judges' confidence counted{decides['soft']}"))
    if everything.weighted:
        plain = result.win_rate(over="all", weighted=False, errors=rule.errors)
        rows.append(("all pairs, unweighted", plain, "(biased: the sample's weights vary)"))
    width = max(len(label) for label, _, _ in rows)
    lines += [f"  {label:{width}s}  {_pct(w)}  {note}" for label, w, note in rows]
    if everything.design_effect:
        lines.append(
            f"  design effect {everything.design_effect:.2f}: the turns carry the information of "
            f"{everything.pairs / everything.design_effect:.0f} independent pairs; per-turn Wilson would say "
            f"[{per_turn.ci_low:.1%}, {per_turn.ci_high:.1%}]"
        )
    if floor:
        lines.append(f"  (A/A noise floor: the same judges on an A/A run, {floor['path']};")
        lines.append("   a distance from 50% no larger than the A/A run's is within the judges' and sampling noise)")
    if by_stratum:
        strata = decision.strata
        if len(strata) > 1:
            lines.append(f"  by stratum ({decision.estimand.split(',')[0]}):")
            for d in strata:
                flag = "  WORSE" if d.worse else ""
                small = "  (small)" if d.small else ""
                lines.append(f"    {d.stratum or '(none)':45s} {_pct(d.win_rate)}  n={d.win_rate.pairs}{flag}{small}")
    lines.append("")
    lines += decision.lines()
    lines.append("")
    con = result.connect()
    try:
        lines.append("per side      replays  calls (cached)   tokens in/out      cost USD   latency p50/p90 ms  capped")
        for side, _model, n, calls, cached, tin, tout, costs, lat, capped, failed, silent in _side_stats(con):
            lat = sorted(lat or [])
            p50 = median(lat) if lat else 0.0
            p90 = lat[int(0.9 * (len(lat) - 1))] if lat else 0.0
            cost = total_cost(costs)
            cost_s = f"{cost:10.4f}" if cost is not None else "   unknown"
            lines.append(
                f"  {side:10s} {n:8d} {calls:6d} ({cached:6d}) {_tokens(tin, 10)}/{_tokens(tout, -8)} {cost_s} "
                f"{p50:9.1f}/{p90:<9.1f} {capped:6d}"
                + (f"  failed {failed}" if failed else "")
                + (f"  no decision {silent}" if silent else "")
            )
        lines += ["", *spend_lines(side_spend(con, m.config.get("prices")))]
        whole = run_cost(result, con)
        lines.append(
            f"run cost     {'unknown' if whole is None else f'{whole:.4f} USD'} (both sides, the judges"
            + (", the session simulators)" if counts.simulating else ")")
        )
        lines += estimate_lines(result, con)
        errors = con.execute("SELECT stage, count(*) FROM errors GROUP BY stage ORDER BY stage").fetchall()
    finally:
        con.close()
    lines.append("")
    calls = counts.calls
    lines.append(
        f"model calls    answered {calls.answered} ({calls.made} attempts, {calls.retries} retried, "
        f"{calls.rate_limited} rate-limited), from cache {calls.cached}; {len(m.sessions)} session(s)"
        + (f"; {calls.lost} sent and lost at a kill (the provider may have billed them)" if calls.lost else "")
    )
    if len(m.sessions) > 1:
        for k, s in enumerate(m.sessions, start=1):
            said = f"{s.answered} answered, {s.cache.hits if s.cache else 0} from cache" if s.calls else "no record"
            retried = f", retried {s.retried_pairs} pairs that had ended in error" if s.retried_pairs else ""
            lines.append(
                f"  session {k}: {s.status:11s} resumed {s.resumed_pairs} pairs{retried}, "
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
