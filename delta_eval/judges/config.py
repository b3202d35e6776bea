"""How a run judges its pairs (stages 2 and 3), and the judge cascade built from that with the run's context.

Example:
    >>> Judges(order="both").order
    'both'
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_serializer

from delta_eval.callables import callable_name
from delta_eval.judges.cascade import JudgeCascade
from delta_eval.judges.context import JudgeContext
from delta_eval.judges.resolve import resolve_equivalence_judge, resolve_pairwise_judge
from delta_eval.matching import MatchOptions

__all__ = ["Judges", "build_cascade"]


class Judges(BaseModel):
    """Stages 2 and 3.

    - ``equivalence``: the stage-2 judge: ``"rule"`` (see :mod:`delta_eval.judges.rules`), ``None`` to skip
      stage 2, an :class:`~delta_eval.judges.base.SupportsEquivalence`, or a factory taking a
      :class:`~delta_eval.judges.context.JudgeContext` (or ``"module:factory"`` naming one) that returns it.
    - ``judge``: the stage-3 judge, the same way (:class:`~delta_eval.judges.base.SupportsComparison`).
    - ``min_confidence``: stage 2 counts an "equivalent" answer only at or above this confidence.
    - ``order``: ``"random"`` shows the candidate as A or B by a seeded coin per pair; ``"both"`` judges each pair
      both ways and calls a disagreement a tie.
    - ``match``: the tolerances of stage 1 and of tool simulation.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    equivalence: Any = "rule"
    judge: Any = "rule"
    min_confidence: float = Field(default=0.8, ge=0.0, le=1.0)
    order: Literal["random", "both"] = "random"
    match: MatchOptions = MatchOptions()

    @field_serializer("equivalence", "judge")
    def _judge_name(self, value: Any) -> str | None:
        return _name(value)

    def names(self) -> tuple[str | None, str]:
        """How the stage-2 and stage-3 judges are named in manifests (``None``: no stage 2)."""
        return _name(self.equivalence), _name(self.judge) or ""


def _name(spec: Any) -> str | None:
    # A judge instance by its name, a factory by where it lives, a string as given.
    if spec is None or isinstance(spec, str):
        return spec
    if isinstance(getattr(spec, "name", None), str) and not isinstance(spec, type):
        return str(spec.name)
    return callable_name(spec)


def build_cascade(config: Judges, context: JudgeContext) -> JudgeCascade:
    """The cascade ``config`` describes, its judges built with ``context`` (the run's models, prices and seed)."""
    return JudgeCascade(
        resolve_equivalence_judge(config.equivalence, context),
        resolve_pairwise_judge(config.judge, context),
        min_confidence=config.min_confidence,
        order=config.order,
        seed=context.seed,
        match=config.match,
    )
