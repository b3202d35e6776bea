"""Prices per model, and the cost of a call from its normalised usage.

Prices are US dollars per million tokens: ``input`` for uncached prompt tokens, ``cached_input`` for cached ones,
``output`` for generated tokens (reasoning included). The built-in table holds list prices as published by the
providers at the date in :data:`PRICES_AS_OF`; pass ``prices=`` to a run to override or extend it (a run's own
table wins). A model with no known price has cost ``None``, never a made-up zero.

Example:
    >>> from delta_eval.schema import Usage
    >>> cost(Usage(input_tokens=1_000_000, cached_input_tokens=400_000, output_tokens=100_000),
    ...      Price(input=2.5, cached_input=1.25, output=10.0))
    3.0
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field

from delta_eval.schema import Usage

__all__ = ["DEFAULT_PRICES", "PRICES_AS_OF", "Price", "cost", "price_for"]

PRICES_AS_OF = "2025-06"


class Price(BaseModel):
    """USD per million tokens. ``cached_input`` defaults to ``input`` when a provider has no cache discount."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cached_input: float | None = Field(default=None, ge=0)


DEFAULT_PRICES: dict[str, Price] = {
    # The simulated model costs nothing: it runs in this process.
    "simulated:*": Price(input=0.0, output=0.0),
    "openai:gpt-4o": Price(input=2.5, cached_input=1.25, output=10.0),
    "openai:gpt-4o-mini": Price(input=0.15, cached_input=0.075, output=0.6),
    "openai:gpt-4.1": Price(input=2.0, cached_input=0.5, output=8.0),
    "openai:gpt-4.1-mini": Price(input=0.4, cached_input=0.1, output=1.6),
    "openai:o3": Price(input=2.0, cached_input=0.5, output=8.0),
    "openai:o4-mini": Price(input=1.1, cached_input=0.275, output=4.4),
    "anthropic:claude-sonnet-4-0": Price(input=3.0, cached_input=0.3, output=15.0),
    "anthropic:claude-3-5-haiku-latest": Price(input=0.8, cached_input=0.08, output=4.0),
    "gemini:gemini-2.5-pro": Price(input=1.25, cached_input=0.31, output=10.0),
    "gemini:gemini-2.5-flash": Price(input=0.3, cached_input=0.075, output=2.5),
}


def price_for(model: str, overrides: Mapping[str, Price] | None = None) -> Price | None:
    """The price of ``model``: an exact entry, else a ``"prefix:*"`` entry; the run's ``overrides`` first."""
    prefix = model.split(":", 1)[0]
    for table in (overrides or {}, DEFAULT_PRICES):
        if model in table:
            return table[model]
        if f"{prefix}:*" in table:
            return table[f"{prefix}:*"]
    return None


def cost(usage: Usage, price: Price | None) -> float | None:
    """Dollars for ``usage`` at ``price`` (cached prompt tokens at the cached rate); ``None`` without a price."""
    if price is None:
        return None
    cached_rate = price.cached_input if price.cached_input is not None else price.input
    uncached = max(0, usage.input_tokens - usage.cached_input_tokens)
    return (uncached * price.input + usage.cached_input_tokens * cached_rate + usage.output_tokens * price.output) / 1e6
