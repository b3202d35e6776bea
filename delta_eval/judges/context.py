"""What a run gives the judges it builds: its model pool, prices, seed and matching tolerances.

A judge factory is any callable taking a :class:`JudgeContext` and returning a judge. An LLM judge takes its model
client from the context, so its calls share the run's response cache (a resumed run never pays a judge twice),
the model's limiter and the retry policy, and are counted with every other call of the run.

Example::

    def my_judge(ctx: JudgeContext) -> SupportsComparison:
        return MyLLMJudge(ctx.client("anthropic:claude-sonnet-4-5"), ctx)

    de.run(..., judges=de.Judges(judge=my_judge))
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from delta_eval.adapters.batch import batch_cost
from delta_eval.adapters.client import ModelClient
from delta_eval.adapters.limits import ModelLimits
from delta_eval.adapters.pool import ModelPool
from delta_eval.catalog import ModelInfo
from delta_eval.matching import DEFAULT_MATCH, MatchOptions
from delta_eval.pricing import Price, cost, price_for
from delta_eval.schema import Usage

__all__ = ["JudgeContext"]


@dataclass(frozen=True)
class JudgeContext:
    """The run's context for building judges.

    - ``pool``: the run's models (cache, limiters, retries); use :meth:`client`.
    - ``prices``: the run's price overrides (see :func:`cost_of`).
    - ``seed``: the run's seed, for judges that draw anything at random.
    - ``match``: the run's deterministic matching tolerances.
    - ``rubric``: the Markdown rubric of a stage-3 judge given none (``None``: the package's; a session run's is
      :data:`~delta_eval.judges.session.SESSION_RUBRIC`).
    """

    pool: ModelPool = field(default_factory=ModelPool)
    prices: Mapping[str, Price] = field(default_factory=dict)
    seed: int = 0
    match: MatchOptions = DEFAULT_MATCH
    rubric: str | None = None

    def client(
        self, model: str, options: Mapping[str, Any] | None = None, limits: ModelLimits | None = None
    ) -> ModelClient:
        """The run's client of ``model`` (shared with any side that uses the same model and options). A judge's
        calls need no answer at once: in a run that batches, they go through the provider's batch API."""
        return self.pool.client(model, options, limits, label="judge", batch=True)

    def cost_of(
        self, model: str, usage: Usage | None, *, info: ModelInfo | None = None, batch: bool = False
    ) -> float | None:
        """Dollars for ``usage`` of ``model`` at the run's prices (``None`` when the model has no price or the call
        reported no usage); ``info`` is what the judge's adapter looked up (an Azure deployment's ``base_model``);
        ``batch``: the call went through the provider's batch API, at its discount."""
        return batch_cost(cost(usage, price_for(model, self.prices, info=info)), batch)
