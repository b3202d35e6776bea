"""The decision rule's configuration: the ``[decision]`` table of a run's configuration, its gates and the user's
checks, as pydantic models and nothing computed.

Kept apart from what computes the decision (:mod:`delta_eval.metrics.decision`, :mod:`delta_eval.metrics.gates`,
:mod:`delta_eval.metrics.checks`) so that loading a configuration, which every worker and shard of a run does,
imports neither the numerics nor the data engines (numpy, pyarrow): only pydantic and this package's core.

Example:
    >>> rule = DecisionRule(margin=0.03, gates=(Gate(metric="error_rate", max=0.01),))
    >>> rule.gates[0].label, rule.estimand.over
    ('error_rate: candidate - baseline <= 0.01', 'all')
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer, ValidationInfo, field_validator, model_validator

from delta_eval.callables import callable_name, resolve_callable

if TYPE_CHECKING:
    from delta_eval.metrics.estimand import Estimand

__all__ = [
    "ABSOLUTE_METRICS",
    "DEFAULT_GATES",
    "GOAL_METRIC",
    "METRICS",
    "REGEX_PREFIX",
    "Check",
    "CheckKind",
    "DecisionRule",
    "Gate",
    "Outcome",
    "Predicate",
]

Outcome = Literal["APPROVED", "PARTIAL", "REJECTED"]

#: The gate metric: sessions where a side missed the goal (candidate minus baseline, by default; see
#: :mod:`delta_eval.metrics.goals`).
GOAL_METRIC = "goal_missed_rate"

#: The built-in metrics a gate can name (besides ``check:<name>``).
METRICS = (
    "critical_rate",
    "severity_rate",
    "error_rate",
    "undecided_rate",
    "invalid_tool_call_rate",
    "text_instead_of_action_rate",
    "no_decision_rate",
    GOAL_METRIC,
    "latency_p95_s",
    "cost_ratio",
)
#: Metrics that are checked against their limit, never against the baseline.
ABSOLUTE_METRICS = ("undecided_rate", "latency_p95_s", "cost_ratio")


class Gate(BaseModel):
    """One limit (see :mod:`delta_eval.metrics.gates`). ``on_fail``: what failing it makes the decision;
    ``required``: whether a gate that could not be evaluated keeps the decision from APPROVED."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    metric: str
    max: float = Field(ge=-1.0)
    compare: Literal["baseline", "absolute"] = "baseline"
    test: Literal["shown", "point", "upper"] = "shown"
    on_fail: Literal["REJECTED", "PARTIAL"] = "REJECTED"
    required: bool = True

    @model_validator(mode="before")
    @classmethod
    def _known_metric(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        metric = str(data.get("metric", ""))
        if metric not in METRICS and not (metric.startswith("check:") and len(metric) > 6):
            raise ValueError(f"unknown gate metric {metric!r}; one of {', '.join(METRICS)}, or check:<name>")
        if metric in ABSOLUTE_METRICS:
            if data.get("compare") == "baseline":
                raise ValueError(f"{metric} is checked against its limit, not against the baseline (compare must "
                                 "be 'absolute')")  # fmt: skip
            data = {**data, "compare": "absolute"}
        return data

    @property
    def label(self) -> str:
        """How the gate is named in reports: ``metric: candidate - baseline <= max`` or ``metric <= max``."""
        if self.compare == "baseline":
            said = f"{self.metric}: candidate - baseline <= {self.max:g}"
        elif self.metric in ABSOLUTE_METRICS:
            said = f"{self.metric} <= {self.max:g}"
        else:
            said = f"{self.metric} (absolute) <= {self.max:g}"
        return said + {"shown": "", "point": " (point value)", "upper": " (upper bound)"}[self.test]


#: The gates a decision checks unless told otherwise.
DEFAULT_GATES: tuple[Gate, ...] = (
    Gate(metric="critical_rate", max=0.0),
    Gate(metric="severity_rate", max=0.02),
    Gate(metric="error_rate", max=0.02),
    Gate(metric="undecided_rate", max=0.05, on_fail="PARTIAL"),
    # Latency and cost are service limits on the observed value, not rates of rare events.
    Gate(metric="latency_p95_s", max=30.0, test="point"),
    Gate(metric="cost_ratio", max=2.0, test="point", on_fail="PARTIAL"),
)


#: The kinds of assertion a :class:`Check` makes; each check sets exactly one of these fields.
CheckKind = Literal["text_matches", "text_not_matches", "tool_called", "tool_not_called", "predicate"]
_KINDS: tuple[CheckKind, ...] = ("text_matches", "text_not_matches", "tool_called", "tool_not_called", "predicate")
#: A regular expression among a check's ``arguments`` starts with this.
REGEX_PREFIX = "re:"

#: A predicate: takes a :class:`~delta_eval.metrics.checks.CheckedTurn`, returns ``True``, ``False``, ``None`` or
#: ``(one of those, detail)``.
#: It serialises as its ``"module:function"`` name. (A serializer in the type, not a ``field_serializer``: the latter
#: makes pydantic keep the field in ``exclude_defaults`` dumps, and a ``None`` cannot be written to TOML.)
Predicate = Annotated[Callable[..., Any], PlainSerializer(callable_name, return_type=str)]


class Check(BaseModel):
    """One of the user's checks (see :mod:`delta_eval.metrics.checks`): a ``name`` (gates refer to it as
    ``check:<name>``), an optional ``description`` for reports, exactly one assertion, and optionally where it
    applies.

    A predicate serialises as its ``"module:qualname"``, so only a module-level function can be read back from a
    dump (a lambda or a nested function cannot).

    Example:
        >>> c = Check(name="economy", tool_called="book_reservation", arguments={"cabin": "economy", "n": "re:^[12]$"},
        ...           when_recorded_calls="book_reservation")
        >>> c.kind, c.describe()
        ('tool_called', "calls book_reservation with {'cabin': 'economy', 'n': 're:^[12]$'}
        (where production called book_reservation)")
        >>> Check.model_validate(c.model_dump(mode="json")) == c
        True
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    # Identifier-like, so that a gate's metric ``check:<name>`` reads unambiguously in configs and reports.
    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_\-]*$", max_length=100)
    description: str = ""
    text_matches: str | None = None
    text_not_matches: str | None = None
    tool_called: str | None = Field(default=None, min_length=1)
    tool_not_called: str | None = Field(default=None, min_length=1)
    arguments: dict[str, Any] | None = None
    predicate: Predicate | None = None
    when_recorded_calls: str | None = Field(default=None, min_length=1)

    @field_validator("predicate", mode="before")
    @classmethod
    def _resolve_predicate(cls, value: Any, info: ValidationInfo) -> Any:
        # Resolved when the config loads, so a misspelt "module:function" fails before any replay is made.
        name = info.data.get("name", "?")
        return None if value is None else resolve_callable(value, f"check {name!r}: predicate")

    @model_validator(mode="after")
    def _one_valid_assertion(self) -> Check:
        kinds = [k for k in _KINDS if getattr(self, k) is not None]
        if len(kinds) != 1:
            found = ", ".join(kinds) if kinds else "none"
            raise ValueError(f"check {self.name!r} needs exactly one of {', '.join(_KINDS)} (found: {found})")
        if self.arguments is not None and kinds[0] not in ("tool_called", "tool_not_called"):
            raise ValueError(f"check {self.name!r}: arguments only go with tool_called or tool_not_called")
        for kind in ("text_matches", "text_not_matches"):
            if (pattern := getattr(self, kind)) is not None:
                _compile(self.name, kind, pattern)
        for key, value in (self.arguments or {}).items():
            if isinstance(value, str) and value.startswith(REGEX_PREFIX):
                _compile(self.name, f"arguments[{key!r}]", value[len(REGEX_PREFIX) :])
        return self

    @property
    def kind(self) -> CheckKind:
        """Which assertion the check makes."""
        return next(k for k in _KINDS if getattr(self, k) is not None)

    def describe(self) -> str:
        """One line saying what the check asserts, for reports."""
        kind = self.kind
        if kind == "text_matches":
            out = f"text matches /{self.text_matches}/"
        elif kind == "text_not_matches":
            out = f"text does not match /{self.text_not_matches}/"
        elif kind == "predicate":
            out = f"predicate {callable_name(self.predicate) if self.predicate else '?'}"
        else:
            verb = "calls" if kind == "tool_called" else "does not call"
            out = f"{verb} {getattr(self, kind)}" + (f" with {self.arguments}" if self.arguments else "")
        if self.when_recorded_calls is not None:
            out += f" (where production called {self.when_recorded_calls})"
        return out


def _compile(check: str, what: str, pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"check {check!r}: {what} {pattern!r} is not a valid regular expression ({exc})") from None


class DecisionRule(BaseModel):
    """How the numbers become a decision (the decision matrix). In TOML, the ``[decision]`` table.

    - ``margin``: non-inferiority margin on the scale of the estimand (0.02: at most 2 points below 50% of the win
      rate ``over`` defines);
    - ``over``, ``soft``, ``weighted``, ``errors``: the estimand (see :mod:`delta_eval.metrics.estimand`): all or
      judged pairs, hard or soft scores, reweighted to the population (``"auto"``: whenever the weights vary), and
      replay errors as losses of the side that failed or left out;
    - ``gates``: the eliminatory gates (default :data:`DEFAULT_GATES`);
    - ``checks``: your own checks of each side's output (:class:`Check`), reported per
      side and usable in gates as ``check:<name>``;
    - ``undecided`` / ``stratum_worse``: the outcome of an undecided comparison, and of a stratum shown worse;
    - ``adjustment``, ``min_conversations``: multiplicity adjustment across strata, and the size below which a
      stratum is flagged small;
    - ``confidence``: of every interval (tests are one-sided at half of ``1 - confidence``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    margin: float = Field(default=0.02, ge=0.0, lt=0.5)
    over: Literal["judged", "all"] = "all"
    soft: bool = False
    weighted: bool | Literal["auto"] = "auto"
    errors: Literal["loss", "exclude"] = "loss"
    gates: tuple[Gate, ...] = DEFAULT_GATES
    checks: tuple[Check, ...] = ()
    undecided: Outcome = "PARTIAL"
    stratum_worse: Outcome = "PARTIAL"
    adjustment: Literal["holm", "bh", "none"] = "holm"
    min_conversations: int = Field(default=10, ge=1)
    confidence: float = Field(default=0.95, gt=0.5, lt=1.0)

    @property
    def estimand(self) -> Estimand:
        """The estimand this rule decides on."""
        from delta_eval.metrics.estimand import Estimand  # on use: it brings the numerics the rule itself needs not

        return Estimand(over=self.over, soft=self.soft, weighted=self.weighted, errors=self.errors)
