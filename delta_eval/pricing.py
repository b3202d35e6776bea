"""Prices per model, and the cost of a call from its normalised usage.

Prices are US dollars per million tokens: ``input`` for uncached prompt tokens, ``cached_input`` for tokens read
from the provider's prompt cache, ``cache_write`` for tokens written to it, ``output`` for generated tokens
(reasoning included). The built-in table holds list prices as published by the
providers at the date in :data:`PRICES_AS_OF`; pass ``prices=`` to a run to override or extend it (a run's own
table wins). A model with no known price has cost ``None``, never a made-up zero, and so has any total that includes it
(:func:`total_cost`, :class:`Spend`): a partly priced set of calls has an unknown cost, not a partial sum.

Example:
    >>> from delta_eval.schema import Usage, total_usage
    >>> cost(Usage(input_tokens=1_000_000, cached_input_tokens=400_000, output_tokens=100_000),
    ...      Price(input=2.5, cached_input=1.25, output=10.0))
    3.0
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from delta_eval.schema import Usage, total_usage

__all__ = ["DEFAULT_PRICES", "PRICES_AS_OF", "Price", "Spend", "cost", "price_for", "total_cost"]

#: When the built-in list prices were read off the providers' pricing pages (openai.com/api/pricing,
#: anthropic.com/pricing, ai.google.dev/gemini-api/docs/pricing). Prices change: pass ``prices=`` for today's.
PRICES_AS_OF = "2025-10"


class Price(BaseModel):
    """USD per million tokens. ``cached_input`` and ``cache_write`` default to ``input`` when a provider prices
    prompt-cache reads or writes no differently."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cached_input: float | None = Field(default=None, ge=0)
    cache_write: float | None = Field(default=None, ge=0)


# Standard (not batch, not priority) rates; Anthropic's cache writes are its 5-minute writes; Gemini's are the rates
# for prompts up to 200k tokens (its longer prompts cost more and are not modelled: override them if you use them).
DEFAULT_PRICES: dict[str, Price] = {
    # The simulated model costs nothing: it runs in this process.
    "simulated:*": Price(input=0.0, output=0.0),
    "openai:gpt-5": Price(input=1.25, cached_input=0.125, output=10.0),
    "openai:gpt-5-mini": Price(input=0.25, cached_input=0.025, output=2.0),
    "openai:gpt-5-nano": Price(input=0.05, cached_input=0.005, output=0.4),
    "openai:gpt-4.1": Price(input=2.0, cached_input=0.5, output=8.0),
    "openai:gpt-4.1-mini": Price(input=0.4, cached_input=0.1, output=1.6),
    "openai:gpt-4.1-nano": Price(input=0.1, cached_input=0.025, output=0.4),
    "openai:gpt-4o": Price(input=2.5, cached_input=1.25, output=10.0),
    "openai:gpt-4o-mini": Price(input=0.15, cached_input=0.075, output=0.6),
    "openai:o3": Price(input=2.0, cached_input=0.5, output=8.0),
    "openai:o4-mini": Price(input=1.1, cached_input=0.275, output=4.4),
    "openai:o3-mini": Price(input=1.1, cached_input=0.55, output=4.4),
    "anthropic:claude-opus-4-1": Price(input=15.0, cached_input=1.5, cache_write=18.75, output=75.0),
    "anthropic:claude-opus-4-0": Price(input=15.0, cached_input=1.5, cache_write=18.75, output=75.0),
    "anthropic:claude-sonnet-4-5": Price(input=3.0, cached_input=0.3, cache_write=3.75, output=15.0),
    "anthropic:claude-sonnet-4-0": Price(input=3.0, cached_input=0.3, cache_write=3.75, output=15.0),
    "anthropic:claude-haiku-4-5": Price(input=1.0, cached_input=0.1, cache_write=1.25, output=5.0),
    "anthropic:claude-3-5-haiku-latest": Price(input=0.8, cached_input=0.08, cache_write=1.0, output=4.0),
    "gemini:gemini-2.5-pro": Price(input=1.25, cached_input=0.31, output=10.0),
    "gemini:gemini-2.5-flash": Price(input=0.3, cached_input=0.075, output=2.5),
    "gemini:gemini-2.5-flash-lite": Price(input=0.1, cached_input=0.025, output=0.4),
    "gemini:gemini-2.0-flash": Price(input=0.1, cached_input=0.025, output=0.4),
}

#: Prefixes priced as another's models: the Responses API bills OpenAI's models at OpenAI's prices.
_PRICED_AS = {"openai-responses": "openai"}
#: A dated or numbered snapshot (``-2025-04-14``, ``-20250929``, ``-001``) costs what its model costs.
_SNAPSHOT = re.compile(r"-(\d{4}-\d{2}-\d{2}|\d{8}|\d{3})$")


def price_for(model: str, overrides: Mapping[str, Price] | None = None) -> Price | None:
    """The price of ``model``, the run's ``overrides`` first: an exact entry, else the entry of the model a dated
    snapshot belongs to, else a ``"prefix:*"`` entry. Azure deployments have names of their own: price them with
    ``prices=``.

    Example:
        >>> price_for("anthropic:claude-sonnet-4-5-20250929").output, price_for("openai-responses:o3").input
        (15.0, 2.0)
        >>> price_for("azure:my-deployment") is None
        True
    """
    prefix, _, name = model.partition(":")
    candidates = [model]
    if prefix in _PRICED_AS:
        candidates.append(f"{_PRICED_AS[prefix]}:{name}")
    candidates += [_SNAPSHOT.sub("", c) for c in candidates if _SNAPSHOT.search(c)]
    for table in (overrides or {}, DEFAULT_PRICES):
        for candidate in candidates:
            if candidate in table:
                return table[candidate]
        if f"{prefix}:*" in table:
            return table[f"{prefix}:*"]
    return None


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
    uncached = max(0, usage.input_tokens - usage.cached_input_tokens - usage.cache_write_tokens)
    dollars = (
        uncached * price.input
        + usage.cached_input_tokens * read_rate
        + usage.cache_write_tokens * write_rate
        + usage.output_tokens * price.output
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
