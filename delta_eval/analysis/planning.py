"""``de.plan``: how many conversations the real run needs, from a pilot run's folder (see
:mod:`delta_eval.metrics.planning`).

Example::

    pilot = de.run(config, sample=de.Stratified(by=["intent"], n=60), out="runs/pilot")
    plan = de.plan(pilot, margin=0.02, power=0.8)
    print(plan)                      # conversations, pairs, judged pairs, cost
    de.run(config, sample=de.Stratified(by=["intent"], n=plan.conversations, stratum_sd=plan.stratum_sd))
"""

from __future__ import annotations

from pathlib import Path

from delta_eval.metrics.decision import DecisionRule
from delta_eval.metrics.planning import SamplePlan, sample_size
from delta_eval.pricing import total_cost
from delta_eval.result import RunResult

__all__ = ["plan"]


def plan(
    pilot: RunResult | str | Path,
    margin: float | None = None,
    *,
    power: float = 0.8,
    expected: float = 0.5,
    confidence: float | None = None,
    min_per_stratum: int = 1,
    rule: DecisionRule | None = None,
) -> SamplePlan:
    """The sample a run like ``pilot`` needs for its decision to show non-inferiority within ``margin`` with
    ``power``, if the true win rate is ``expected``; allocated over the pilot's strata (Neyman, with their
    population sizes), with the judging and replay cost the pilot's prices imply.

    The plan answers the decision rule's question: ``rule`` defaults to the one the pilot was configured with (its
    estimand: all or judged pairs, weights, soft scores, errors), ``margin`` and ``confidence`` to the rule's."""
    result = pilot if isinstance(pilot, RunResult) else RunResult(pilot)
    if rule is None:
        rule = DecisionRule.model_validate(result.manifest.config.get("decision") or {})
    verdicts = result.table("verdicts")
    judged = [r for r in verdicts.select(["stage", "judge_cost_usd"]).to_pylist() if r["stage"] == "judge"]
    judge_cost = total_cost(r["judge_cost_usd"] for r in judged)
    replays = [r for r in result.table("replays").select(["side", "cost_usd", "conversation_id"]).to_pylist()
               if r["side"] != "recorded"]  # fmt: skip
    replay_cost = total_cost(r["cost_usd"] for r in replays)
    conversations = len({r["conversation_id"] for r in replays})
    population = {r["stratum"]: r["population"] for r in result.table("strata").to_pylist()}
    return sample_size(
        verdicts,
        rule.margin if margin is None else margin,
        power=power,
        expected=expected,
        confidence=rule.confidence if confidence is None else confidence,
        estimand=rule.estimand,
        population=population or None,
        judge_cost_per_pair=None if judge_cost is None or not judged else judge_cost / len(judged),
        replay_cost_per_conversation=None if replay_cost is None or not conversations else replay_cost / conversations,
        min_per_stratum=min_per_stratum,
    )
