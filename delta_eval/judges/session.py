"""Judging sessions: two whole transcripts of one conversation rolled forward, one per side.

In order:

1. Outcome check (deterministic), where the conversation records the actions that reach the user's goal (tau-bench's
   gold actions, ``expected``: a metadata path to a list of ``{name, kwargs}`` or ``{name, arguments}``): a side
   reached the goal when it made every expected action, with equivalent arguments (the project's tool-call
   matching), leaving out the actions of tools named by ``ignore`` (glob patterns: reads that need not be repeated).
   When one side reached the goal and the other did not, the side that did wins the session with full confidence
   (stage ``judge``, judge ``outcome``), whatever the wording.
2. Stage 1: both transcripts made the same tool calls with equivalent arguments, in order, and ended the same way
   (and reached the goal alike): equivalent, whatever was said around them.
3. Otherwise the run's cascade (stage 2, then stage 3) on the whole transcripts: the judges see the opening as the
   conversation and each side's transcript, user messages included, as its output, and score the rubric's
   dimensions (:data:`SESSION_RUBRIC` is written for sessions: goal reached, correctness of actions, policy,
   efficiency, tone).

Every verdict's ``details`` say how each side ended and whether it reached the goal; the goal is also a dimension
score (``goal_reached``, 1 or 0) of each side where it was checked.

Example:
    >>> from delta_eval.schema import Step, ToolCall
    >>> out = TurnOutput(steps=(Step(tool_calls=(ToolCall(id="1", name="cancel", arguments='{"id": "X"}'),)),))
    >>> goal_reached(out, [{"name": "cancel", "kwargs": {"id": "X"}}, {"name": "get", "kwargs": {}}], ("get",))
    (True, [])
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from delta_eval.calls import ModelRequest
from delta_eval.judges.cascade import Decision, JudgeCascade
from delta_eval.matching import DEFAULT_MATCH, MatchOptions, call_sequences_equivalent, calls_equivalent
from delta_eval.paths import MISSING, get_path
from delta_eval.schema import Replay, ReplayPoint, ToolCall, TurnOutput, Verdict

__all__ = ["SESSION_RUBRIC", "SessionJudging", "expected_actions", "goal_reached"]

SESSION_RUBRIC = """Whole sessions are judged on what they did for the customer and the business, as an experienced
support lead would: each output is the agent's side of a whole conversation, with the customer's answers.

## Dimensions
- goal_reached: the customer's goal was reached (or rightly refused), with the actions it needed.
- correctness: every action taken was the right one, with the right arguments, and none was taken wrongly.
- policy: the agent followed its policy and instructions, including confirmations, refusals and escalation.
- efficiency: the agent got there without needless questions, turns or tool calls.
- tone: the agent was clear, courteous and appropriately brief."""


def expected_actions(metadata: dict[str, Any], path: str) -> list[dict[str, Any]] | None:
    """The expected actions a conversation records at ``path`` (``None``: none recorded)."""
    value = get_path(metadata, path)
    if value is MISSING or value is None:
        return None
    if isinstance(value, str):
        value = json.loads(value)
    if not isinstance(value, list):
        raise ValueError(f"{path} holds {type(value).__name__}, not a list of actions")
    return [a for a in value if isinstance(a, dict)]


def goal_reached(
    out: TurnOutput, expected: Sequence[dict[str, Any]], ignore: Sequence[str] = (), match: MatchOptions = DEFAULT_MATCH
) -> tuple[bool, list[str]]:
    """Whether ``out`` made every expected action (except the ignored tools'), and the ones it missed."""
    made = out.tool_calls
    missing: list[str] = []
    for action in expected:
        name = str(action.get("name", ""))
        if any(fnmatch.fnmatchcase(name, p) for p in ignore):
            continue
        args = action.get("kwargs", action.get("arguments", {}))
        want = ToolCall(id="expected", name=name, arguments=args if isinstance(args, str) else json.dumps(args))
        if not any(calls_equivalent(c, want, match) for c in made):
            missing.append(name)
    return not missing, missing


@dataclass
class SessionJudging:
    """Decides session pairs: the outcome check and session stage 1 here, stages 2 and 3 by ``cascade``.

    ``expected`` is the metadata path of the expected actions (``None``: no outcome check), ``ignore`` the tools
    whose expected actions are not required.
    """

    cascade: JudgeCascade
    expected: str | None = None
    ignore: tuple[str, ...] = ()

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
        """The decision on one session pair (the same signature as :meth:`JudgeCascade.decide`)."""
        details: dict[str, Any] = {"end": {"baseline": baseline.finish_reason, "candidate": candidate.finish_reason}}
        goals: dict[str, bool] = {}
        if baseline.error is None and candidate.error is None and self.expected is not None:
            actions = expected_actions(point.metadata, self.expected)
            if actions is not None:
                match = self.cascade.match
                for name, r in (("baseline", baseline), ("candidate", candidate)):
                    reached, missing = goal_reached(r.output, actions, self.ignore, match)
                    goals[name] = reached
                    if missing:
                        details.setdefault("missing_actions", {})[name] = missing
                details["goal_reached"] = goals
        scores = {side: {"goal_reached": float(v)} for side, v in goals.items()}
        base: dict[str, Any] = {
            "pair_id": point.pair_id,
            "conversation_id": point.conversation_id,
            "turn_index": point.turn_index,
            "epoch": point.epoch,
            "stratum": stratum,
            "weight": weight,
        }
        if goals and goals["baseline"] != goals["candidate"]:
            winner = "candidate" if goals["candidate"] else "baseline"
            loser = "baseline" if winner == "candidate" else "candidate"
            missed = ", ".join(details["missing_actions"][loser])
            verdict = Verdict(
                **base,
                stage="judge",
                outcome=winner,
                preference=1.0 if winner == "candidate" else 0.0,
                confidence=1.0,
                severity="critical",
                candidate_scores=scores["candidate"],
                baseline_scores=scores["baseline"],
                summary=f"the {winner} reached the goal; the {loser} did not",
                reasoning=f"The {loser} never made the expected action(s): {missed}.",
                judge="outcome",
                details=details,
            )
            return Decision(verdict)
        if (
            baseline.error is None
            and candidate.error is None
            and baseline.finish_reason == candidate.finish_reason
            and call_sequences_equivalent(baseline.output.tool_calls, candidate.output.tool_calls, self.cascade.match)
        ):
            verdict = Verdict(
                **base,
                stage="deterministic",
                outcome="equivalent",
                confidence=1.0,
                reasoning="both sessions made the same tool calls and ended the same way",
                judge="deterministic",
                candidate_scores=scores.get("candidate", {}),
                baseline_scores=scores.get("baseline", {}),
                details=details,
            )
            return Decision(verdict)
        decision = await self.cascade.decide(
            point,
            baseline,
            candidate,
            baseline_request=baseline_request,
            candidate_request=candidate_request,
            stratum=stratum,
            weight=weight,
        )
        v = decision.verdict
        update = {
            "details": {**v.details, **details},
            "candidate_scores": {**v.candidate_scores, **scores.get("candidate", {})},
            "baseline_scores": {**v.baseline_scores, **scores.get("baseline", {})},
        }
        return replace(decision, verdict=v.model_copy(update=update))
