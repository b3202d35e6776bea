"""Build the judges a configuration names, with the run's :class:`~delta_eval.judges.context.JudgeContext`.

A judge is given as ``"rule"`` (the rule-based judges of :mod:`delta_eval.judges.rules`), ``None`` (stage 2 only:
skip it), a judge instance, a factory taking the context, or ``"module:factory"`` naming such a factory (the form
config files use).
"""

from __future__ import annotations

from typing import Any

from delta_eval.callables import callable_name, resolve_callable
from delta_eval.exceptions import ConfigError
from delta_eval.judges.base import SupportsComparison, SupportsEquivalence
from delta_eval.judges.context import JudgeContext
from delta_eval.judges.rules import RuleEquivalenceJudge, RulePairwiseJudge

__all__ = ["resolve_equivalence_judge", "resolve_pairwise_judge"]


def _build(spec: Any, context: JudgeContext, protocol: type, what: str) -> Any:
    if isinstance(spec, protocol) and not isinstance(spec, type):  # a class has the attributes too: a factory
        return spec
    factory = resolve_callable(spec, what)
    try:
        judge = factory(context)
    except TypeError as exc:
        raise ConfigError(f"{what} factory {callable_name(factory)} must take a JudgeContext: {exc}") from None
    if not isinstance(judge, protocol):
        method = "equivalent(pair)" if protocol is SupportsEquivalence else "compare(pair)"
        raise ConfigError(f"{what} {spec!r} built {judge!r}, which has no 'name' and async '{method}'")
    return judge


def resolve_equivalence_judge(spec: Any, context: JudgeContext) -> SupportsEquivalence | None:
    """The stage-2 judge for ``spec`` (``None`` skips stage 2)."""
    if spec is None:
        return None
    if spec == "rule":
        return RuleEquivalenceJudge(match=context.match)
    judge: SupportsEquivalence = _build(spec, context, SupportsEquivalence, "equivalence judge")
    return judge


def resolve_pairwise_judge(spec: Any, context: JudgeContext) -> SupportsComparison:
    """The stage-3 judge for ``spec``."""
    if spec is None:
        raise ConfigError("a run needs a stage-3 judge; use judge='rule' for the rule-based one")
    if spec == "rule":
        return RulePairwiseJudge(match=context.match)
    judge: SupportsComparison = _build(spec, context, SupportsComparison, "judge")
    return judge
