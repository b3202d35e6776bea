"""Build the judges a configuration names, with the run's :class:`~delta_eval.judges.context.JudgeContext`.

A judge is given as ``"rule"`` (the rule-based judges of :mod:`delta_eval.judges.rules`), ``None`` (stage 2 only:
skip it), an LLM judge's settings (:class:`~delta_eval.judges.llm.EquivalenceJudge`,
:class:`~delta_eval.judges.llm.PairwiseJudge`), a judge instance, a factory taking the context, or
``"module:factory"`` naming such a factory (the form config files use). A list of these is a panel; the members of
a panel must have distinct names, since each one's answer is kept (and cached) under its name.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from delta_eval.callables import callable_name, resolve_callable
from delta_eval.exceptions import ConfigError
from delta_eval.judges.base import SupportsComparison, SupportsEquivalence
from delta_eval.judges.context import JudgeContext
from delta_eval.judges.rules import RuleEquivalenceJudge, RulePairwiseJudge

__all__ = ["resolve_equivalence_judges", "resolve_pairwise_judges"]


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


def _members(spec: Any) -> list[Any]:
    return list(spec) if isinstance(spec, Sequence) and not isinstance(spec, str) else [spec]


def _distinct(judges: list[Any], what: str) -> None:
    twice = sorted(name for name, n in Counter(j.name for j in judges).items() if n > 1)
    if twice:
        raise ConfigError(f"two members of the {what} panel are named {twice[0]!r}; give each a distinct name=")


def _panel(spec: Any, context: JudgeContext, protocol: type, what: str, rule: Any) -> list[Any]:
    judges = [rule(match=context.match) if m == "rule" else _build(m, context, protocol, what) for m in _members(spec)]
    _distinct(judges, what)
    return judges


def resolve_equivalence_judges(spec: Any, context: JudgeContext) -> list[SupportsEquivalence]:
    """The stage-2 judges (a panel, or one) for ``spec``; empty for ``None`` (no stage 2)."""
    if spec is None:
        return []
    return _panel(spec, context, SupportsEquivalence, "equivalence judge", RuleEquivalenceJudge)


def resolve_pairwise_judges(spec: Any, context: JudgeContext) -> list[SupportsComparison]:
    """The stage-3 judges (a panel, or one) for ``spec``."""
    if spec is None or not _members(spec):
        raise ConfigError("a run needs a stage-3 judge; use judge='rule' for the rule-based one")
    return _panel(spec, context, SupportsComparison, "judge", RulePairwiseJudge)
