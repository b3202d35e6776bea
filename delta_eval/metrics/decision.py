"""The decision: ship (APPROVED), ship with reservations (PARTIAL), or not (REJECTED), and what decided it.

One estimand decides (:mod:`delta_eval.metrics.estimand`: which pairs count, weighted or not, hard or soft, how
errors count), stated beside the verdict with the margin on its scale. In order, each step able only to lower the
outcome:

1. Gates (:mod:`delta_eval.metrics.gates`), before and apart from any average: a failed gate gives its ``on_fail``;
   a required gate that could not be evaluated keeps the decision from APPROVED (PARTIAL).
2. Non-inferiority of the win rate against ``margin`` (:mod:`delta_eval.metrics.paired`): ``worse`` is REJECTED,
   ``undecided`` gives ``undecided`` (PARTIAL by default), ``better``, ``not worse`` and ``no difference`` pass.
3. Strata (:mod:`delta_eval.metrics.strata`): a stratum shown ``worse`` after the multiplicity adjustment gives
   ``stratum_worse`` (PARTIAL by default).

With several epochs the decision is also taken on each epoch alone (``epochs``: the outcome per epoch), and each
side's consistency across epochs is reported (:mod:`delta_eval.metrics.consistency`), so one pooled verdict never
stands alone.

``decided_by`` names the first step that set the final outcome ("gate critical_rate: candidate - baseline <= 0",
"non-inferiority: worse", "stratum task_type=refund: worse", or "every gate passed; not worse").

A merge gate reads the outcome as an exit status (:class:`ExitCode`, ``Decision.exit_code``): 0 when the outcome is
not at or beyond the ``fail_on`` level, else 3 for REJECTED and 4 for PARTIAL.

Example:
    >>> rows = [{"outcome": o, "conversation_id": f"c{i}"}
    ...         for i in range(300) for o in ("tie", "candidate" if i % 2 else "equivalent")]
    >>> d = decide(rows, rule=DecisionRule(gates=()))
    >>> d.outcome, d.decided_by
    ('APPROVED', 'every gate passed; better')
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import IntEnum
from typing import Any, Literal

import numpy as np
import pyarrow as pa
from pydantic import BaseModel, ConfigDict

from delta_eval.duckdb_connect import connect
from delta_eval.metrics.checks import check_results
from delta_eval.metrics.consistency import Consistency, consistency
from delta_eval.metrics.counted import Counted, counted_rows
from delta_eval.metrics.decision_sql import (
    Source,
    audit_of,
    check_rates_of,
    consistency_of,
    gate_results,
    goal_rates_of,
    side_metrics_of,
)
from delta_eval.metrics.estimand import Estimand
from delta_eval.metrics.frames import Rows, rows_of, to_arrow
from delta_eval.metrics.gates import GateResult, evaluate_gates
from delta_eval.metrics.goals import goal_rates, goal_sums
from delta_eval.metrics.paired import (
    NetPreference,
    NonInferiority,
    SignTest,
    net_preference_of,
    non_inferiority_of,
    sign_test_of,
)
from delta_eval.metrics.rule import DecisionRule, Outcome
from delta_eval.metrics.sides import SIDE_COLUMNS, Rate, SideMetrics, rate, side_metrics
from delta_eval.metrics.strata import StratumDecision, by_stratum
from delta_eval.metrics.tallied import tallied_or_counted

__all__ = ["Decision", "DecisionRule", "ExitCode", "FailOn", "Outcome", "decide"]

_RANK: dict[Outcome, int] = {"APPROVED": 2, "PARTIAL": 1, "REJECTED": 0}

#: The least severe outcome that fails a merge gate: ``rejected`` (the default: only REJECTED fails), ``partial``
#: (PARTIAL fails too) or ``never`` (report only).
FailOn = Literal["rejected", "partial", "never"]
_FAILING: dict[FailOn, frozenset[Outcome]] = {
    "rejected": frozenset({"REJECTED"}),
    "partial": frozenset({"REJECTED", "PARTIAL"}),
    "never": frozenset(),
}


class ExitCode(IntEnum):
    """The exit status of ``delta-eval run`` (and of ``delta-eval report --fail-on``), for a CI step to gate on.

    Each failing outcome has its own code, apart from the codes of errors, so a pipeline can tell "the candidate is
    worse" from "the evaluation broke". 1 and 2 keep the meaning they have for every ``delta-eval`` command.
    """

    OK = 0  #: APPROVED, or an outcome below the ``fail_on`` level
    ERROR = 1  #: nothing ran: a bad configuration, a missing key or file, a run folder refused
    USAGE = 2  #: bad command-line arguments
    REJECTED = 3  #: the decision is REJECTED
    PARTIAL = 4  #: PARTIAL with fail_on partial: too little evidence, a gate not evaluated, a stratum worse
    INCOMPLETE = 5  #: the run started but gave no decision: failed, interrupted, or no pair could be judged


class Decision(BaseModel):
    """The outcome, what decided it, and every number behind it. ``estimand`` says in words which estimate
    decided (weighted or not, over which pairs)."""

    model_config = ConfigDict(frozen=True)

    outcome: Outcome
    decided_by: str
    rule: DecisionRule
    estimand: str = ""
    non_inferiority: NonInferiority
    net_preference: NetPreference
    sign_test: SignTest
    gates: list[GateResult]
    strata: list[StratumDecision]
    sides: dict[str, SideMetrics]
    checks: dict[str, dict[str, Rate]] = {}
    epochs: dict[int, Outcome] = {}
    consistency: dict[str, Consistency] = {}
    audit: dict[str, int] = {}
    #: In a session run whose export records the expected actions: each side's share of goals reached.
    goals: dict[str, Rate] = {}

    def __str__(self) -> str:
        return "\n".join(self.lines())

    @property
    def exit_code(self) -> ExitCode:
        """The exit status a merge gate gives this decision with the default ``fail_on="rejected"``: 3 when
        REJECTED, else 0 (see :meth:`exit_code_at`)."""
        return self.exit_code_at("rejected")

    def exit_code_at(self, fail_on: FailOn = "rejected") -> ExitCode:
        """The exit status when outcomes at or beyond ``fail_on`` fail: ``ExitCode.REJECTED`` or
        ``ExitCode.PARTIAL`` for a failing outcome, ``ExitCode.OK`` otherwise.

        Example:
            >>> rows = [{"outcome": "equivalent", "conversation_id": f"c{i}"} for i in range(10)]
            >>> d = decide(rows, rule=DecisionRule(gates=()))
            >>> d.outcome, int(d.exit_code), int(d.exit_code_at("partial"))
            ('PARTIAL', 0, 4)
        """
        return ExitCode[self.outcome] if self.outcome in _FAILING[fail_on] else ExitCode.OK

    def lines(self) -> list[str]:
        """The decision as text lines, for the report."""
        ni, net, st = self.non_inferiority, self.net_preference, self.sign_test
        out = [f"DECISION: {self.outcome} - decided by {self.decided_by}"]
        out.append(f"  non-inferiority: {ni}")
        if net.estimate is not None:
            out.append(
                f"  net preference {net.estimate:+.1%} [{net.ci_low:+.1%}, {net.ci_high:+.1%}]  (P(candidate better)"
                f" - P(baseline better))"
            )
        out.append(
            f"  sign test over conversations: {st.favour_candidate} favour the candidate, {st.favour_baseline} the "
            f"baseline, {st.balanced} in balance; p = {st.p_value:.3g}"
        )
        if self.audit.get("audited"):
            a = self.audit
            out.append(
                f"  stage-2 audit: {a['audited']} of {a['stage2']} pairs stage 2 found equivalent were judged again; "
                f"{a['different']} judged different ({a['baseline']} for the baseline, {a['candidate']} for the "
                "candidate)"
            )
        if self.gates:
            out.append("  gates (checked before any average):")
            out += [f"    {g}" for g in self.gates]
        flagged = [s for s in self.strata if s.worse or s.small]
        if len(self.strata) > 1:
            worse = [s.stratum for s in self.strata if s.worse]
            small = [s.stratum for s in self.strata if s.small]
            out.append(
                f"  strata: {len(self.strata)} tested ({self.rule.adjustment} adjustment); worse: "
                f"{', '.join(worse) or 'none'}"
                + (f"; small (< {self.rule.min_conversations} conversations, wide intervals): {len(small)}"
                   if small else "")
            )  # fmt: skip
            out += [f"    {s.stratum}: {s.verdict}, win rate {s.win_rate.estimate:.1%}, p(worse) adjusted "
                    f"{s.p_worse_adjusted:.3g}" for s in flagged if s.worse]  # fmt: skip
        if self.epochs:
            approved = sum(o == "APPROVED" for o in self.epochs.values())
            each = ", ".join(f"{e}: {o}" for e, o in sorted(self.epochs.items()))
            out.append(f"  epochs: APPROVED in {approved} of {len(self.epochs)} ({each})")
        for side, c in self.consistency.items():
            out.append(
                f"  {side} consistency over {c.epochs} epochs: two epochs give the same answer at "
                f"{c.agreement} of point pairs; the same answer in every epoch at {c.consistent} of {c.points} points"
            )
        if self.goals:
            n = next(iter(self.goals.values())).n
            said = ", ".join(f"{side} {r}" for side, r in self.goals.items())
            out.append(f"  goal reached ({n:g} sessions checked): {said}")
        for side, m in self.sides.items():
            out.append(f"  {side}: {m.summary()}")
            for name, r in self.checks.get(side, {}).items():
                out.append(f"    check {name}: fails {r}")
        return out


def decide(verdicts: Rows, replays: Rows | None = None, rule: DecisionRule | None = None, *, con: Any = None,
           tallies: pa.Table | None = None, replay_tallies: str | None = None) -> Decision:  # fmt: skip
    """The decision on verdicts (and replays, for the sides' metrics, their gates and the rule's checks).

    Tables (Arrow, a DuckDB relation, a DataFrame) are decided in DuckDB, one row per conversation reaching Python;
    so are the names of tables or views in the DuckDB connection ``con`` (``decide("verdicts", "replays",
    con=run.connect())``: straight from a run's Parquet files, at any size). Rows of mappings are decided in memory,
    with the same numbers. With table names (and only then), ``tallies`` may give the verdicts' tallies
    (:mod:`delta_eval.store.tallies`; :func:`~delta_eval.store.views.tallies_of` reads them from a run's connection,
    of its snapshot), which must count every verdict of ``verdicts`` and no other: the win rates are then summed
    from them where they can be (the same numbers, see :func:`~delta_eval.metrics.tallied.tallied`), not from the
    verdicts. Likewise (with table names only) ``replay_tallies`` may name the replays' tallies in ``con``
    (:mod:`delta_eval.store.replay_tallies`; :func:`~delta_eval.store.views.replay_tallies_of` names them in a run's
    connection), which must sum every replay of ``replays`` and no other: what the sides' metrics count of the
    replays is then read from them where it can be (see :class:`~delta_eval.metrics.decision_sql.Source`)."""
    r = rule or DecisionRule()
    if isinstance(verdicts, str) or isinstance(replays, str):
        if con is None or not isinstance(verdicts, str) or not isinstance(replays, str | None):
            raise ValueError("table names need the DuckDB connection they are in (con=), for verdicts and replays")
        src = Source(con, verdicts, replays, replay_tallies=replay_tallies)
        try:
            return _decide_source(src, r, tallies)
        finally:
            src.close()
    table = _table(verdicts)
    replay_table = _table(replays) if replays is not None else None
    if table is None or (replays is not None and replay_table is None):
        return _decide_rows(verdicts, replays, r)
    db = connect()
    try:
        # Each row's position names it where it has no conversation, as the rows path does.
        if "_row" in table.column_names:
            table = table.drop_columns(["_row"])
        db.register("verdicts", table.append_column("_row", pa.array(np.arange(table.num_rows, dtype=np.int64))))
        if replay_table is not None:
            if replay_table.num_columns == 0:  # no rows, so no columns (``from_pylist([])``): DuckDB needs one
                replay_table = pa.table({"pair_id": pa.nulls(replay_table.num_rows, pa.string())})
            db.register("replays", replay_table)
        src = Source(db, "verdicts", "replays" if replay_table is not None else None)
        return _decide_source(src, r)
    finally:
        db.close()


def _decide_source(src: Source, r: DecisionRule, tallies: pa.Table | None = None) -> Decision:
    """The decision on a :class:`~delta_eval.metrics.decision_sql.Source`: every number computed in DuckDB (the win
    rates from the verdicts' ``tallies`` where given and they serve)."""
    e = r.estimand
    # Over all pairs and per stratum from one pass over the verdicts, added up per stratum (no interval, test or
    # verdict below needs a row per conversation).
    whole: dict[str, Counted] = {}
    per_stratum = tallied_or_counted(tallies, src.counted_verdicts, e, con=src.db, by="stratum", total=whole)
    counted = whole[""]
    e = e.model_copy(update={"weighted": counted.weighted})  # "auto" settled once, for every number below
    ni = non_inferiority_of(counted, e, r.margin, confidence=r.confidence)
    sides = side_metrics_of(src, r.confidence)
    checks, names = None, [c.name for c in r.checks]
    if r.checks and src.replays is not None:
        found = check_results(r.checks, src.raw_replays_table())
        checks = src.register(found.select(["check", "pair_id", "side", "passed"]))
    gates = gate_results(src, r.gates, sides, checks=checks, check_names=names if checks else (),
                         weighted=counted.weighted, confidence=r.confidence, counted=counted)  # fmt: skip
    strata = by_stratum(src.verdicts, r.margin, adjustment=r.adjustment, min_conversations=r.min_conversations,
                        confidence=r.confidence, counted=per_stratum, **e.model_dump())  # fmt: skip
    seen = src.epochs()
    epochs: dict[int, Outcome] = {}
    if len(seen) > 1:
        for k in seen:
            one = src.epoch(k)
            try:
                epochs[k] = _decide_source(one, r).outcome
            finally:
                one.close()
    judged = tallied_or_counted(tallies, src.counted_verdicts, e.model_copy(update={"over": "judged"}), con=src.db)[""]
    return _decision(
        r, e, counted, ni, judged, gates, strata, sides,
        checks=check_rates_of(src, checks, names, r.confidence) if checks else {},
        epochs=epochs,
        consistency=consistency_of(src) if src.replays is not None and len(seen) > 1 else {},
        audit=audit_of(src),
        goals=goal_rates_of(src, counted.weighted, r.confidence),
    )  # fmt: skip


def _decide_rows(verdicts: Rows, replays: Rows | None, r: DecisionRule) -> Decision:
    """The decision on rows of mappings, in memory (what the DuckDB path is held equal to)."""
    rows = rows_of(verdicts, _GATE_COLUMNS)
    seen = sorted({int(v.get("epoch") or 1) for v in rows})
    # The sides and gates read a few columns of each replay (steps only for consistency across epochs); the
    # rule's own checks may read any.
    wanted = None if r.checks else [*SIDE_COLUMNS, "epoch", *(["steps"] if len(seen) > 1 else [])]
    replay_rows = rows_of(replays, wanted) if replays is not None else None
    e = r.estimand
    counted = counted_rows(rows_of(verdicts), e)[""]
    e = e.model_copy(update={"weighted": counted.weighted})  # "auto" settled once, for every number below
    ni = non_inferiority_of(counted, e, r.margin, confidence=r.confidence)
    sides = side_metrics(replay_rows, r.confidence) if replay_rows is not None else {}
    results = _check_results(r, replay_rows)
    gates = evaluate_gates(r.gates, rows, sides, replays=replay_rows, checks=results, weighted=counted.weighted,
                           confidence=r.confidence)  # fmt: skip
    votes = rows_of(verdicts)
    strata = by_stratum(votes, r.margin, adjustment=r.adjustment, min_conversations=r.min_conversations,
                        confidence=r.confidence, **e.model_dump())  # fmt: skip
    epochs: dict[int, Outcome] = {}
    if len(seen) > 1:
        for k in seen:
            mine = [v for v in votes if int(v.get("epoch") or 1) == k]
            theirs = None if replay_rows is None else [x for x in replay_rows if int(x.get("epoch") or 1) == k]
            epochs[k] = _decide_rows(mine, theirs, r).outcome
    judged = counted_rows(votes, e.model_copy(update={"over": "judged"}))[""]
    return _decision(
        r, e, counted, ni, judged, gates, strata, sides,
        checks=_check_rates(results, replay_rows, r.confidence),
        epochs=epochs,
        consistency=consistency(replay_rows) if replay_rows is not None and len(seen) > 1 else {},
        audit=_audit(rows),
        goals=goal_rates(goal_sums(rows, _weight if counted.weighted else _unit), r.confidence),
    )  # fmt: skip


def _decision(r: DecisionRule, e: Estimand, counted: Counted, ni: NonInferiority, judged: Counted,
              gates: list[GateResult], strata: list[StratumDecision], sides: dict[str, SideMetrics],
              **rest: Any) -> Decision:  # fmt: skip
    """The outcome from the steps that can lower it, and the decision with every number behind it."""
    steps: list[tuple[Outcome, str]] = []
    steps += [(g.gate.on_fail, f"gate {g.gate.label}") for g in gates if g.passed is False]
    steps += [("PARTIAL", f"gate {g.gate.label} not evaluated ({g.detail})")
              for g in gates if g.passed is None and g.gate.required]  # fmt: skip
    if ni.verdict == "worse":
        steps.append(("REJECTED", "non-inferiority: worse"))
    elif ni.verdict == "undecided":
        steps.append((r.undecided, "non-inferiority: undecided"))
    if len(strata) > 1:
        steps += [(r.stratum_worse, f"stratum {s.stratum}: worse") for s in strata if s.worse]
    outcome: Outcome = "APPROVED"
    decided_by = f"every gate passed; {ni.verdict}"
    for level, why in steps:
        if _RANK[level] < _RANK[outcome]:
            outcome, decided_by = level, why
    return Decision(
        outcome=outcome,
        decided_by=decided_by,
        rule=r,
        estimand=e.describe(counted.weighted),
        non_inferiority=ni,
        net_preference=net_preference_of(ni.win_rate),
        sign_test=sign_test_of(judged),
        gates=gates,
        strata=strata,
        sides=sides,
        **rest,
    )


#: The verdict columns the gates, the epochs, the audit and the goals read.
_GATE_COLUMNS = ["pair_id", "conversation_id", "outcome", "severity", "weight", "error", "error_side", "epoch",
                 "stage", "audit_outcome", "candidate_scores", "baseline_scores"]  # fmt: skip


def _weight(v: Mapping[str, Any]) -> float:
    return float(v.get("weight") or 1.0)


def _unit(v: Mapping[str, Any]) -> float:
    return 1.0


def _table(verdicts: Rows) -> Any:
    """``verdicts`` as an Arrow table, or ``None`` for rows of mappings."""
    try:
        return to_arrow(verdicts)
    except TypeError:
        return None


def _check_results(
    rule: DecisionRule, replays: list[dict[str, Any]] | None
) -> dict[str, dict[tuple[str, str], bool | None]]:
    if not rule.checks or replays is None:
        return {}
    out: dict[str, dict[tuple[str, str], bool | None]] = {c.name: {} for c in rule.checks}
    table = check_results(rule.checks, replays)
    columns = [table.column(c).to_pylist() for c in ("check", "pair_id", "side", "passed")]
    for name, pair_id, side, passed in zip(*columns, strict=True):
        out[name][(pair_id, side)] = passed
    return out


def _check_rates(
    results: Mapping[str, Mapping[tuple[str, str], bool | None]], replays: list[dict[str, Any]] | None,
    confidence: float,
) -> dict[str, dict[str, Rate]]:  # fmt: skip
    """Per side, each check's failure rate with its interval."""
    if not results or replays is None:
        return {}
    conversation = {str(x.get("pair_id")): str(x.get("conversation_id")) for x in replays}
    out: dict[str, dict[str, Rate]] = {}
    for name, found in results.items():
        for side in ("baseline", "candidate"):
            applicable = [(p, v) for (p, s), v in found.items() if s == side and v is not None]
            out.setdefault(side, {})[name] = rate([float(not v) for _, v in applicable],
                                                  [conversation.get(p, p) for p, _ in applicable],
                                                  confidence=confidence)  # fmt: skip
    return out


def _audit(rows: list[dict[str, Any]]) -> dict[str, int]:
    """What the audit of stage 2 found: pairs stage 2 resolved, those audited, and what stage 3 said of them."""
    stage2 = [v for v in rows if v.get("stage") == "equivalence"]
    audited = [v for v in stage2 if v.get("audit_outcome") is not None]
    said = [str(v.get("audit_outcome")) for v in audited]
    return {
        "stage2": len(stage2),
        "audited": len(audited),
        "different": sum(s in ("candidate", "baseline") for s in said),
        "candidate": said.count("candidate"),
        "baseline": said.count("baseline"),
    }
