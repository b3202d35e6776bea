"""Prices per model, and the cost of a call from its normalised usage.

Prices are US dollars per million tokens: ``input`` for uncached prompt tokens, ``cached_input`` for tokens read
from the provider's prompt cache, ``cache_write`` for tokens written to it, ``output`` for generated tokens and
``reasoning`` for the reasoning part of them where a provider prices it apart. List prices come from the model
catalogue (:mod:`delta_eval.catalog`, a snapshot dated :data:`PRICES_AS_OF`); pass ``prices=`` to a run to override
or extend them (a run's own table wins). A model with no known price has cost ``None``, never a made-up zero, and so
has any total that includes it (:func:`total_cost`, :class:`Spend`): a partly priced set of calls has an unknown
cost, not a partial sum.

Example:
    >>> from delta_eval.schema import Usage, total_usage
    >>> cost(Usage(input_tokens=1_000_000, cached_input_tokens=400_000, output_tokens=100_000),
    ...      Price(input=2.5, cached_input=1.25, output=10.0))
    3.0
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from delta_eval.catalog import CATALOG_AS_OF, ModelInfo, Price, model_info
from delta_eval.schema import Usage, total_usage

__all__ = ["PRICES_AS_OF", "Price", "Spend", "cost", "price_for", "total_cost"]

#: The date of the catalogue the list prices come from. Prices change: pass ``prices=`` for today's.
PRICES_AS_OF = CATALOG_AS_OF


def price_for(
    model: str, overrides: Mapping[str, Price] | None = None, *, info: ModelInfo | None = None
) -> Price | None:
    """The price of ``model``: the run's ``overrides`` first (an exact entry, else a ``"prefix:*"`` entry), else
    the catalogue's (a dated snapshot costs what its model costs; Bedrock and Vertex ids are read as the model they
    serve, see :func:`~delta_eval.catalog.model_info`). ``info`` is what an adapter already looked up (an Azure
    deployment's ``base_model``, the run's ``models`` corrections).

    Example:
        >>> price_for("anthropic:claude-sonnet-4-5-20250929").output, price_for("openai-responses:o3").input
        (15.0, 2.0)
        >>> price_for("azure:my-deployment") is None
        True
    """
    overrides = overrides or {}
    prefix = model.partition(":")[0]
    if model in overrides:
        return overrides[model]
    if f"{prefix}:*" in overrides:
        return overrides[f"{prefix}:*"]
    return (info or model_info(model)).price


def cost(usage: Usage | None, price: Price | None) -> float | None:
    """Dollars for ``usage`` at ``price`` (cache reads and writes at their rates); ``None`` without a price or
    without usage (a response that reported none).

    Example:
        >>> written = Usage(input_tokens=1_000_000, cache_write_tokens=1_000_000)
        >>> cost(written, Price(input=3.0, output=15.0, cache_write=3.75))
        3.75
    """
    if price is None or usage is None:
        return None
    read_rate = price.cached_input if price.cached_input is not None else price.input
    write_rate = price.cache_write if price.cache_write is not None else price.input
    reasoning_rate = price.reasoning if price.reasoning is not None else price.output
    uncached = max(0, usage.input_tokens - usage.cached_input_tokens - usage.cache_write_tokens)
    reasoning = min(usage.reasoning_tokens, usage.output_tokens)
    dollars = (
        uncached * price.input
        + usage.cached_input_tokens * read_rate
        + usage.cache_write_tokens * write_rate
        + (usage.output_tokens - reasoning) * price.output
        + reasoning * reasoning_rate
    )
    return dollars / 1e6


def total_cost(costs: Iterable[float | None]) -> float | None:
    """The sum of ``costs``, or ``None`` when any of them is unknown (an empty set costs 0).

    Example:
        >>> total_cost([0.5, 0.25]), total_cost([0.5, None])
        (0.75, None)
    """
    total = 0.0
    for c in costs:
        if c is None:
            return None
        total += c
    return total


@dataclass
class Spend:
    """What a set of model calls used: tokens, dollars, time, and how many calls (served from the cache or not).

    The one place usage and cost are summed, for replays and judges alike: ``cost_usd`` becomes ``None`` as soon as
    one call of unknown price is added, so a partly priced set never reports a partial sum; likewise ``usage``
    becomes ``None`` (and ``cost_usd`` with it) once a call without usage is added, and ``unknown_usage`` counts
    those calls.

    Example:
        >>> spend = Spend()
        >>> spend.add(Usage(input_tokens=100), cost_usd=0.01, latency_ms=120.0)
        >>> spend.add(Usage(output_tokens=5), cost_usd=None, latency_ms=80.0, cached=True)
        >>> spend.usage.input_tokens, spend.cost_usd, spend.latency_ms, spend.calls, spend.cached_calls
        (100, None, 200.0, 2, 1)
        >>> spend.add(None, cost_usd=None)
        >>> spend.usage, spend.unknown_usage
        (None, 1)
    """

    usage: Usage | None = field(default_factory=Usage)
    cost_usd: float | None = 0.0
    latency_ms: float = 0.0
    calls: int = 0
    cached_calls: int = 0
    unknown_usage: int = 0

    def add(
        self, usage: Usage | None, *, cost_usd: float | None, latency_ms: float = 0.0, cached: bool = False
    ) -> None:
        """Count one call (``usage=None``: it reported no usage)."""
        self.usage = total_usage((self.usage, usage))
        self.unknown_usage += usage is None
        self.cost_usd = total_cost((self.cost_usd, cost_usd))
        self.latency_ms += latency_ms
        self.calls += 1
        self.cached_calls += int(cached)
