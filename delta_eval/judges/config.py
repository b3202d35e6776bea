"""How a run judges its pairs (stages 2 and 3), and the judge cascade built from that with the run's context.

Example:
    >>> from delta_eval.judges.llm import EquivalenceJudge, PairwiseJudge
    >>> judges = Judges(
    ...     equivalence={"model": "openai:gpt-4.1-nano"},          # as a TOML table gives it
    ...     judge=[PairwiseJudge(model="anthropic:claude-sonnet-4-5"), PairwiseJudge(model="gemini:gemini-2.5-pro")],
    ...     order="both",
    ... )
    >>> judges.names()
    ('openai:gpt-4.1-nano', 'anthropic:claude-sonnet-4-5 + gemini:gemini-2.5-pro')
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_serializer, field_validator

from delta_eval.callables import callable_name
from delta_eval.judges.cascade import JudgeCascade
from delta_eval.judges.context import JudgeContext
from delta_eval.judges.llm import EquivalenceJudge, PairwiseJudge
from delta_eval.judges.resolve import resolve_equivalence_judges, resolve_pairwise_judges
from delta_eval.matching import MatchOptions

__all__ = ["Judges", "build_cascade"]


class Judges(BaseModel):
    """Stages 2 and 3.

    - ``equivalence``: the stage-2 judge: ``"rule"`` (see :mod:`delta_eval.judges.rules`), ``None`` to skip
      stage 2, an :class:`~delta_eval.judges.llm.EquivalenceJudge` (a table with ``model`` in TOML), an
      :class:`~delta_eval.judges.base.SupportsEquivalence`, or a factory taking a
      :class:`~delta_eval.judges.context.JudgeContext` (or ``"module:factory"`` naming one) that returns it; a list
      of these is a panel.
    - ``judge``: the stage-3 judge, the same way (:class:`~delta_eval.judges.llm.PairwiseJudge`,
      :class:`~delta_eval.judges.base.SupportsComparison`); a list is a panel.
    - ``min_confidence``: stage 2 resolves a pair only when (the median of) its confidence that the outputs are
      equivalent reaches this.
    - ``order``: ``"random"`` shows the candidate as A or B by a seeded coin per pair; ``"both"`` judges each pair
      both ways.
    - ``disagreement``: with ``order="both"``, what a judge whose two orders disagree counts as: ``"tie"`` or
      ``"mean"`` (the mean of the two preferences).
    - ``audit_fraction``: the seeded share of stage-2 "equivalent" pairs also sent to stage 3, to measure stage 2's
      false-equivalence rate (default 5%; 0 turns the audit off).
    - ``match``: the tolerances of stage 1 and of tool simulation.

    How panels, orders and the audit combine: :mod:`delta_eval.judges.cascade`.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    equivalence: Any = "rule"
    judge: Any = "rule"
    min_confidence: float = Field(default=0.8, ge=0.0, le=1.0)
    order: Literal["random", "both"] = "random"
    disagreement: Literal["tie", "mean"] = "tie"
    audit_fraction: float = Field(default=0.05, ge=0.0, le=1.0)
    match: MatchOptions = MatchOptions()

    @field_validator("equivalence")
    @classmethod
    def _equivalence_settings(cls, value: Any) -> Any:
        return _settings(value, EquivalenceJudge)

    @field_validator("judge")
    @classmethod
    def _judge_settings(cls, value: Any) -> Any:
        return _settings(value, PairwiseJudge)

    @field_serializer("equivalence", "judge")
    def _judge_record(self, value: Any) -> Any:
        return _record(value)

    def names(self) -> tuple[str | None, str]:
        """How the stage-2 and stage-3 judges are named in manifests (``None``: no stage 2); a panel's names are
        joined with ``" + "``."""
        return _name(self.equivalence), _name(self.judge) or ""

    def models(self) -> dict[str, list[str]]:
        """The models of the LLM judges, by stage (``equivalence``, ``judge``); judges of other kinds have none.

        Example:
            >>> Judges(judge={"model": "anthropic:claude-sonnet-4-5"}).models()
            {'equivalence': [], 'judge': ['anthropic:claude-sonnet-4-5']}
        """
        return {
            stage: [m.model for m in _as_list(spec) if isinstance(m, EquivalenceJudge | PairwiseJudge)]
            for stage, spec in (("equivalence", self.equivalence), ("judge", self.judge))
        }

    def modules(self) -> list[str]:
        """The modules the user's own judges come from (a ``"module:factory"`` name's module, a factory's or an
        instance's), in order: a sharded run's workers import them before their shard arrives.

        Example:
            >>> Judges(equivalence="rule", judge="my_judges:strict").modules()
            ['my_judges']
        """
        found: list[str] = []
        for spec in [*_as_list(self.equivalence), *_as_list(self.judge)]:
            if isinstance(spec, str):
                module = spec.partition(":")[0] if ":" in spec else None
            elif spec is None or isinstance(spec, EquivalenceJudge | PairwiseJudge):
                module = None
            else:  # a factory (a partial's function) or an instance
                module = getattr(getattr(spec, "func", spec), "__module__", None) or type(spec).__module__
            if module and module != "__main__":  # a worker's __main__ is not the session's script
                found.append(module)
        return list(dict.fromkeys(found))


def _settings(value: Any, settings: type[EquivalenceJudge] | type[PairwiseJudge]) -> Any:
    # TOML gives an LLM judge as a table, a panel as an array: read them as the judge's settings.
    if isinstance(value, dict):
        return settings.model_validate(value)
    if isinstance(value, Sequence) and not isinstance(value, str):
        return tuple(_settings(v, settings) for v in value)
    return value


def _as_list(spec: Any) -> list[Any]:
    return list(spec) if isinstance(spec, tuple | list) else [spec]


def _record(spec: Any) -> Any:
    # What the manifest keeps of a judge: an LLM judge's settings in full, anything else by name.
    if isinstance(spec, tuple | list):
        return [_record(s) for s in spec]
    if isinstance(spec, EquivalenceJudge | PairwiseJudge):
        return spec.model_dump(mode="json", exclude_defaults=True)
    return _name(spec)


def _name(spec: Any) -> str | None:
    # A judge instance by its name, an LLM judge by its label, a factory by where it lives, a string as given.
    if spec is None or isinstance(spec, str):
        return spec
    if isinstance(spec, tuple | list):
        return " + ".join(str(_name(s)) for s in spec) or None
    if isinstance(spec, EquivalenceJudge | PairwiseJudge):
        return spec.label
    if isinstance(getattr(spec, "name", None), str) and not isinstance(spec, type):
        return str(spec.name)
    return callable_name(spec)


def build_cascade(config: Judges, context: JudgeContext) -> JudgeCascade:
    """The cascade ``config`` describes, its judges built with ``context`` (the run's models, prices and seed)."""
    return JudgeCascade(
        resolve_equivalence_judges(config.equivalence, context),
        resolve_pairwise_judges(config.judge, context),
        min_confidence=config.min_confidence,
        order=config.order,
        seed=context.seed,
        match=config.match,
        disagreement=config.disagreement,
        audit_fraction=config.audit_fraction,
    )
