"""The judging funnel: stage 1 (deterministic), stage 2 (cheap equivalence judges), stage 3 (pairwise judges).

Each pair leaves with exactly one :class:`~delta_eval.schema.Verdict` saying which stage decided it, one
:class:`~delta_eval.schema.Judgement` per judge call, and any error rows. A pair whose replays failed gets an
``error`` verdict; a stage-2 failure is recorded and the pair goes on to stage 3; when no stage-3 judge could answer
(provider error, unusable answer, a judge's own bug), the verdict is an ``error`` with the reason and every failed
call's row keeps what the judge said. Nothing is dropped, and a failure is never a silent tie.

Position bias: the judges see the outputs as A and B. With ``order="random"`` the candidate is A or B by a coin
seeded by (seed, pair id), so the same run always shows the same order and half the pairs go each way; with
``order="both"`` each judge sees the pair both ways. Its two answers disagree when they map to different outcomes;
``disagreement="tie"`` then counts the pair as a tie for that judge, ``"mean"`` takes the mean of the two
preferences. Both answers are kept, and ``details.position_inconsistent`` marks the pair.

Preference: a judge saying the candidate is better with confidence ``c`` prefers it with probability
``0.5 + c / 2`` (a tie is 0.5). A panel (several judges) decides by the median preference; its dimension scores are
medians. Severity belongs to the side that lost the pair: the verdict's severity is the most severe any answer gave
*among the answers that blamed that same side* (safety is not averaged away, and an answer that blamed the other
side says nothing about how badly this one failed); a tie has none. With ``order="both"``, a pair one order could
not answer (the judge failed in it) is labelled with the order that did answer, and ``details.one_order`` says so.

Audit: a seeded ``audit_fraction`` of the pairs stage 2 found equivalent also go to stage 3. Their verdict stays
``equivalent``; what stage 3 said is kept (``audit_outcome``, ``judgements.audit``), so the rate at which stage 2
calls different outputs equivalent is measured on every run.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from statistics import median
from typing import Any, Literal, Protocol

import anyio

from delta_eval.calls import ModelRequest
from delta_eval.exceptions import JudgeError
from delta_eval.judges.base import (
    EquivalenceResult,
    PairView,
    PairwiseResult,
    SideView,
    SupportsComparison,
    SupportsEquivalence,
)
from delta_eval.judges.deterministic import deterministic_equivalence
from delta_eval.matching import DEFAULT_MATCH, MatchOptions
from delta_eval.pricing import Spend
from delta_eval.schema import ErrorRecord, Judgement, Outcome, Replay, ReplayPoint, Severity, Verdict

__all__ = ["Decision", "JudgeCascade", "SupportsDecide", "candidate_is_a", "drawn_for_audit", "preference"]

_SEVERITY_RANK: dict[Severity, int] = {"none": 0, "minor": 1, "critical": 2}


def candidate_is_a(seed: int, pair_id: str) -> bool:
    """The seeded coin: whether the candidate is shown as A for this pair."""
    return hashlib.sha256(f"{seed}:{pair_id}".encode()).digest()[0] & 1 == 1


def drawn_for_audit(seed: int, pair_id: str, fraction: float) -> bool:
    """Whether a pair stage 2 found equivalent is also sent to stage 3 (a seeded draw with probability
    ``fraction``).

    Example:
        >>> sum(drawn_for_audit(1, f"c#{k}", 0.05) for k in range(10_000))  # about 5%, the same every time
        517
    """
    if fraction <= 0:
        return False
    draw = int.from_bytes(hashlib.sha256(f"audit:{seed}:{pair_id}".encode()).digest()[:8], "big") / 2**64
    return draw < fraction


def preference(winner: Literal["A", "B", "tie"], confidence: float, cand_a: bool) -> float:
    """The probability that the candidate is the better output, from one answer about A and B.

    Example:
        >>> preference("A", 0.8, cand_a=True), preference("A", 0.8, cand_a=False), preference("tie", 0.9, True)
        (0.9, 0.09999999999999998, 0.5)
    """
    if winner == "tie":
        return 0.5
    return 0.5 + confidence / 2 if (winner == "A") == cand_a else 0.5 - confidence / 2


def _outcome(pref: float) -> Outcome:
    return "candidate" if pref > 0.5 else "baseline" if pref < 0.5 else "tie"


def _equivalence_answer(result: EquivalenceResult) -> str:
    return {True: "equivalent", False: "different", None: "unsure"}[result.equivalent]


@dataclass
class Decision:
    """What judging one pair produced: its verdict, one judgement per judge call, and error rows."""

    verdict: Verdict
    judgements: list[Judgement] = field(default_factory=list)
    errors: list[ErrorRecord] = field(default_factory=list)


class SupportsDecide(Protocol):
    """What decides a pair: the cascade (turns), or :class:`~delta_eval.judges.session.SessionJudging` (sessions)."""

    async def decide(
        self,
        point: ReplayPoint,
        baseline: Replay,
        candidate: Replay,
        *,
        baseline_request: ModelRequest | None = None,
        candidate_request: ModelRequest | None = None,
        stratum: str = "",
        weight: float = 1.0,
    ) -> Decision:
        """The decision on one pair."""
        ...


@dataclass
class _Answer:
    """One stage-3 judge call that answered: which judge, in which order, what it said."""

    judge: str
    cand_a: bool
    result: PairwiseResult

    @property
    def preference(self) -> float:
        return preference(self.result.winner, self.result.confidence, self.cand_a)

    def scores(self, side: Literal["candidate", "baseline"]) -> dict[str, float]:
        letter = "A" if (side == "candidate") == self.cand_a else "B"
        return dict(self.result.scores.get(letter, {}))


@dataclass
class _Judging:
    """One pair on its way through stages 2 and 3: the calls made, what they cost, the notes they left."""

    point: ReplayPoint
    shown: PairView
    cand_a: bool
    spend: Spend = field(default_factory=Spend)
    judgements: list[Judgement] = field(default_factory=list)
    errors: list[ErrorRecord] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)

    def view(self, cand_a: bool) -> PairView:
        return self.shown if cand_a == self.cand_a else self.shown.swapped()

    def _add(self, stage: Literal["equivalence", "judge"], judge: str, cand_a: bool, **fields: Any) -> None:
        p = self.point
        row = Judgement(
            pair_id=p.pair_id,
            conversation_id=p.conversation_id,
            turn_index=p.turn_index,
            stage=stage,
            judge=judge,
            candidate_position="A" if cand_a else "B",
            **fields,
        )
        # What judging the pair cost is the sum of its calls, counted here and only here.
        self.spend.add(row.usage, cost_usd=row.cost_usd, latency_ms=row.latency_ms)
        self.judgements.append(row)

    def equivalence(self, judge: str, result: EquivalenceResult, resolved: bool) -> None:
        said = result.model_dump(include={"confidence", "reasoning", "raw", "usage", "cost_usd", "latency_ms"})
        answer = _equivalence_answer(result)
        outcome: Outcome | None = "equivalent" if resolved else None
        self._add("equivalence", judge, self.cand_a, answer=answer, outcome=outcome, prompt_hash=result.prompt_hash,
                  **said)  # fmt: skip

    def pairwise(self, answer: _Answer, audit: bool) -> None:
        r = answer.result
        said = r.model_dump(include={"confidence", "reasoning", "raw", "usage", "cost_usd", "latency_ms", "severity",
                                     "summary", "prompt_hash"})  # fmt: skip
        self._add(
            "judge",
            answer.judge,
            answer.cand_a,
            answer=r.winner,
            outcome=_outcome(answer.preference),
            preference=answer.preference,
            candidate_scores=answer.scores("candidate"),
            baseline_scores=answer.scores("baseline"),
            audit=audit,
            **said,
        )

    def failed(
        self,
        stage: Literal["equivalence", "judge"],
        judge: str,
        cand_a: bool,
        exc: Exception,
        message: str,
        audit: bool = False,
    ) -> None:
        # A failed call is still a call: its row says so and keeps what the judge said; a call whose cost is
        # unknown (a provider failure) makes the pair's cost unknown.
        said: dict[str, Any] = {"cost_usd": None}
        if isinstance(exc, JudgeError):
            # The judge answered (unusably): what it said and what that cost are known.
            said = {"raw": exc.raw or {}, "cost_usd": exc.cost_usd, "latency_ms": exc.latency_ms}
            if exc.usage is not None:
                said["usage"] = exc.usage
        self._add(stage, judge, cand_a, answer="error", error=f"{type(exc).__name__}: {exc}", audit=audit, **said)
        p = self.point
        self.errors.append(
            ErrorRecord.from_exception(
                exc, "judge", message=message, record=p.pair_id, conversation_id=p.conversation_id, pair_id=p.pair_id
            )
        )

    def verdict_fields(self) -> dict[str, Any]:
        return {
            "judge_usage": self.spend.usage,
            "judge_cost_usd": self.spend.cost_usd,
            "judge_latency_ms": self.spend.latency_ms,
            "details": self.details,
        }


def _names(judges: Sequence[Any]) -> str:
    return " + ".join(j.name for j in judges)


@dataclass
class JudgeCascade:
    """Runs the three stages on a pair.

    ``equivalence`` and ``judge`` each take one judge or a panel (a list); ``equivalence`` may be ``None`` (or empty)
    to skip stage 2. See the module docstring for ``order``, ``disagreement`` and ``audit_fraction``.

    Example::

        cascade = JudgeCascade(RuleEquivalenceJudge(), RulePairwiseJudge(), seed=7, order="both")
        decision = await cascade.decide(point, baseline_replay, candidate_replay)
    """

    equivalence: SupportsEquivalence | Sequence[SupportsEquivalence] | None
    judge: SupportsComparison | Sequence[SupportsComparison]
    min_confidence: float = 0.8
    order: Literal["random", "both"] = "random"
    seed: int = 0
    match: MatchOptions = DEFAULT_MATCH
    disagreement: Literal["tie", "mean"] = "tie"
    audit_fraction: float = 0.0

    def __post_init__(self) -> None:
        eq = self.equivalence
        self._equivalence: list[SupportsEquivalence] = [] if eq is None else [eq] if _single(eq) else list(eq)  # type: ignore[list-item, arg-type]
        self._judges: list[SupportsComparison] = [self.judge] if _single(self.judge) else list(self.judge)  # type: ignore[list-item, arg-type]
        if not self._judges:
            raise ValueError("a cascade needs at least one stage-3 judge")

    async def decide(
        self,
        point: ReplayPoint,
        baseline: Replay,
        candidate: Replay,
        *,
        baseline_request: ModelRequest | None = None,
        candidate_request: ModelRequest | None = None,
        stratum: str = "",
        weight: float = 1.0,
    ) -> Decision:
        """The decision on one pair. ``*_request`` is the request each side was sent (judges see it)."""
        base: dict[str, Any] = {
            "pair_id": point.pair_id,
            "conversation_id": point.conversation_id,
            "turn_index": point.turn_index,
            "epoch": point.epoch,
            "stratum": stratum,
            "weight": weight,
        }
        failed = [r for r in (baseline, candidate) if r.error is not None]
        if failed:
            reason = "; ".join(f"{r.side} replay failed: {r.error}" for r in failed)
            side = "both" if len(failed) == 2 else ("baseline" if failed[0] is baseline else "candidate")
            return Decision(Verdict(**base, stage="error", outcome="error", error=reason, error_side=side))

        det = deterministic_equivalence(baseline.output, candidate.output, self.match)
        if det.equivalent:
            said = {"confidence": 1.0, "reasoning": det.reason, "judge": "deterministic"}
            return Decision(Verdict(**base, stage="deterministic", outcome="equivalent", **said))

        sides = (_side(baseline, baseline_request), _side(candidate, candidate_request))
        cand_a = candidate_is_a(self.seed, point.pair_id)
        a, b = (sides[1], sides[0]) if cand_a else sides
        run = _Judging(point, PairView(point=point, a=a, b=b), cand_a, details={"stage1": det.reason})

        if self._equivalence:
            resolved = await self._stage2(run)
            if resolved is not None:
                fields = {**resolved}
                if drawn_for_audit(self.seed, point.pair_id, self.audit_fraction):
                    answers = await self._stage3(run, audit=True)
                    if answers:
                        fields["audit_outcome"] = _outcome(self._panel_preference(run, answers))
                        fields["orders_agree"] = _orders_agree(run)
                        run.details["audit"] = fields["audit_outcome"]
                verdict = Verdict(**base, **run.verdict_fields(), stage="equivalence", outcome="equivalent", **fields)
                return Decision(verdict, run.judgements, run.errors)

        answers = await self._stage3(run, audit=False)
        if not answers:
            said = {
                "error": run.errors[-1].message if run.errors else "no judge answered",
                "judge": _names(self._judges),
                "error_side": "judge",
            }
            verdict = Verdict(**base, **run.verdict_fields(), stage="error", outcome="error", **said)
            return Decision(verdict, run.judgements, run.errors)
        verdict = Verdict(**base, **run.verdict_fields(), stage="judge", **self._combine(run, answers))
        return Decision(verdict, run.judgements, run.errors)

    async def _stage2(self, run: _Judging) -> dict[str, Any] | None:
        """Ask the equivalence judges; the verdict fields when they confidently say equivalent, else ``None``."""
        results: list[tuple[SupportsEquivalence, EquivalenceResult | Exception]] = []

        async def ask(judge: SupportsEquivalence) -> None:
            try:
                results.append((judge, await judge.equivalent(run.shown)))
            except Exception as exc:  # a judge is pluggable code: its failure is recorded; the pair goes on
                results.append((judge, exc))

        async with anyio.create_task_group() as tg:
            for judge in self._equivalence:
                tg.start_soon(ask, judge)
        results.sort(key=lambda item: self._equivalence.index(item[0]))
        answered = [(j, r) for j, r in results if isinstance(r, EquivalenceResult)]
        # A member's vote: its confidence when it says equivalent, else 0; the panel resolves on the median vote.
        votes = [r.confidence if r.equivalent else 0.0 for _, r in answered]
        resolved = bool(votes) and median(votes) >= self.min_confidence
        for judge, r in results:
            if isinstance(r, Exception):
                message = f"equivalence judge {judge.name} failed, pair sent to the judge: {type(r).__name__}: {r}"
                run.failed("equivalence", judge.name, run.cand_a, r, message)
            else:
                run.equivalence(judge.name, r, resolved)
        if answered:
            first = answered[0][1]
            run.details["stage2"] = {
                "answers": [_equivalence_answer(r) for _, r in answered],
                "confidence": median(votes) if votes else None,
                "judge": _names([j for j, _ in answered]),
            }
        if not resolved:
            return None
        return {
            "confidence": median(votes),
            "reasoning": first.reasoning if len(answered) == 1 else " | ".join(r.reasoning for _, r in answered),
            "judge": _names([j for j, _ in answered]),
            "prompt_hash": ",".join(sorted({r.prompt_hash for _, r in answered if r.prompt_hash})),
        }

    async def _stage3(self, run: _Judging, *, audit: bool) -> list[_Answer]:
        """Every stage-3 judge in every order, at once; the answers in (judge, order) order."""
        orders = [run.cand_a, not run.cand_a] if self.order == "both" else [run.cand_a]
        slots: dict[tuple[int, bool], _Answer | Exception] = {}

        async def ask(k: int, judge: SupportsComparison, cand_a: bool) -> None:
            try:
                slots[(k, cand_a)] = _Answer(judge.name, cand_a, await judge.compare(run.view(cand_a)))
            except Exception as exc:  # recorded with what the judge said; never a silent tie
                slots[(k, cand_a)] = exc

        async with anyio.create_task_group() as tg:
            for k, judge in enumerate(self._judges):
                for cand_a in orders:
                    tg.start_soon(ask, k, judge, cand_a)
        answers: list[_Answer] = []
        for k, judge in enumerate(self._judges):
            for cand_a in orders:
                got = slots[(k, cand_a)]
                if isinstance(got, Exception):
                    what = "audit judge" if audit else "judge"
                    run.failed("judge", judge.name, cand_a, got, f"{what} {judge.name} failed: {type(got).__name__}: "
                               f"{got}", audit=audit)  # fmt: skip
                else:
                    run.pairwise(got, audit)
                    answers.append(got)
        return answers

    def _judge_preferences(self, run: _Judging, answers: list[_Answer]) -> dict[str, float]:
        """Each judge's preference for the candidate, its orders combined by the disagreement rule."""
        by_judge: dict[str, list[_Answer]] = {}
        for answer in answers:
            by_judge.setdefault(answer.judge, []).append(answer)
        prefs: dict[str, float] = {}
        if self.order == "both":
            run.details["orders_compared"] = sum(len(own) == 2 for own in by_judge.values())
        for name, own in by_judge.items():
            values = [a.preference for a in own]
            disagree = len({_outcome(v) for v in values}) > 1
            if disagree:
                run.details["position_inconsistent"] = True
                run.details.setdefault("order_outcomes", {})[name] = [_outcome(v) for v in values]
            prefs[name] = 0.5 if disagree and self.disagreement == "tie" else sum(values) / len(values)
        return prefs

    def _panel_preference(self, run: _Judging, answers: list[_Answer]) -> float:
        return float(median(self._judge_preferences(run, answers).values()))

    def _combine(self, run: _Judging, answers: list[_Answer]) -> dict[str, Any]:
        """The verdict fields from every answer: median preference, most severe severity, median scores."""
        prefs = self._judge_preferences(run, answers)
        pref = float(median(prefs.values()))
        outcome = _outcome(pref)
        # Severity belongs to the side that lost: only answers that blamed that side say how badly it failed.
        blamed = [a for a in answers if _outcome(a.preference) == outcome]
        severities: list[Severity] = []
        for a in blamed:
            if a.result.severity is not None:
                severities.append(a.result.severity)
        names = list(prefs)
        # The judge wrote its summary about "A" and "B": say which was which.
        first = answers[0]
        said = first.result.summary
        summary = f"(A = {'candidate' if first.cand_a else 'baseline'}) {said}" if said else ""
        if len(names) > 1:
            run.details["panel"] = prefs
        if run.details.get("position_inconsistent") and self.disagreement == "tie" and len(answers) == 2:
            first, second = answers
            reasoning = (
                f"the two orders disagree ({_outcome(first.preference)} vs {_outcome(second.preference)}): tie. "
                f"First: {first.result.reasoning} Second: {second.result.reasoning}"
            )
        elif len(answers) == 1:
            reasoning = answers[0].result.reasoning
        else:
            reasoning = "\n\n".join(f"[{a.judge}, candidate as {'A' if a.cand_a else 'B'}] {a.result.reasoning}"
                                    for a in answers)  # fmt: skip
        severity: Severity | None = None
        if outcome == "tie":
            severity = "none" if any(a.result.severity for a in answers) else None
        elif severities:
            worst: Severity = max(severities, key=_SEVERITY_RANK.__getitem__)
            severity = worst
        answered = {a.cand_a for a in answers}
        if self.order == "both" and len(answered) == 1:
            # The other order failed: this verdict rests on one order only, and says so.
            run.details["one_order"] = True
            position: Literal["A", "B", "both"] = "A" if answered.pop() else "B"
        else:
            position = "both" if self.order == "both" else ("A" if run.cand_a else "B")
        return {
            "outcome": outcome,
            "preference": pref,
            "confidence": float(median(a.result.confidence for a in answers)),
            "severity": severity,
            "candidate_scores": _median_scores([a.scores("candidate") for a in answers]),
            "baseline_scores": _median_scores([a.scores("baseline") for a in answers]),
            "summary": summary,
            "reasoning": reasoning,
            "judge": " + ".join(names),
            "prompt_hash": ",".join(sorted({a.result.prompt_hash for a in answers if a.result.prompt_hash})),
            "candidate_position": position,
            "orders_agree": _orders_agree(run),
        }


def _orders_agree(run: _Judging) -> bool | None:
    # Whether the two orders agreed, for pairs where some judge answered in both.
    return not run.details.get("position_inconsistent") if run.details.get("orders_compared") else None


def _single(value: Any) -> bool:
    return not isinstance(value, list | tuple)


def _median_scores(scores: list[dict[str, float]]) -> dict[str, float]:
    dims = sorted({d for s in scores for d in s})
    return {d: float(median(s[d] for s in scores if d in s)) for d in dims}


def _side(replay: Replay, request: ModelRequest | None) -> SideView:
    return SideView(
        output=replay.output, request=request, finish_reason=replay.finish_reason, hit_tool_cap=replay.hit_tool_cap
    )
