"""Build the judges a configuration names: ``"simulated"``, ``"module:factory"``, an instance, or ``None``."""

from __future__ import annotations

from typing import Any

from delta_eval.callables import resolve_callable
from delta_eval.exceptions import ConfigError
from delta_eval.judges.base import EquivalenceJudge, PairwiseJudge
from delta_eval.judges.simulated import SimulatedEquivalenceJudge, SimulatedPairwiseJudge
from delta_eval.matching import MatchOptions

__all__ = ["resolve_equivalence_judge", "resolve_pairwise_judge"]


def _build(spec: Any, what: str) -> Any:
    if isinstance(spec, str):
        return resolve_callable(spec, what)()
    return spec


def resolve_equivalence_judge(spec: Any, match: MatchOptions) -> EquivalenceJudge | None:
    """The stage-2 judge for ``spec`` (``None`` skips stage 2)."""
    if spec is None:
        return None
    if spec == "simulated":
        return SimulatedEquivalenceJudge(match=match)
    judge = _build(spec, "equivalence judge")
    if not isinstance(judge, EquivalenceJudge):
        raise ConfigError(f"equivalence judge {spec!r} has no 'name' and async 'equivalent(point, a, b)'")
    return judge


def resolve_pairwise_judge(spec: Any, match: MatchOptions) -> PairwiseJudge:
    """The stage-3 judge for ``spec``."""
    if spec is None:
        raise ConfigError("a run needs a stage-3 judge; use judge='simulated' for the rule-based stand-in")
    if spec == "simulated":
        return SimulatedPairwiseJudge(match=match)
    judge = _build(spec, "judge")
    if not isinstance(judge, PairwiseJudge):
        raise ConfigError(f"judge {spec!r} has no 'name' and async 'compare(point, a, b)'")
    return judge
