"""What the library knows of one model: its prices, limits and which parameters it takes.

:class:`ModelInfo` is read by the adapters (which reasoning and sampling parameters to send, and how), by pricing
and by ``delta-eval models``. :class:`ModelOverride` is how a user corrects or completes it for one model
(``models = { "openai:my-finetune" = { reasoning = false, price = { input = 0.3, output = 1.2 } } }``).
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Effort", "ModelInfo", "ModelOverride", "Price"]

#: The reasoning effort names across providers: OpenAI's ``reasoning_effort``, Anthropic's ``output_config.effort``
#: and Gemini's ``thinkingLevel`` (lower-cased).
Effort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]


class Price(BaseModel):
    """USD per million tokens. ``cached_input`` and ``cache_write`` default to ``input``, and ``reasoning`` to
    ``output``, when a provider prices them no differently.

    Example:
        >>> Price(input=3.0, output=15.0, cached_input=0.3).cached_input
        0.3
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cached_input: float | None = Field(default=None, ge=0)
    cache_write: float | None = Field(default=None, ge=0)
    reasoning: float | None = Field(default=None, ge=0)


class ModelInfo(BaseModel):
    """One model's capabilities and prices.

    - ``known``: whether the catalogue (or the user) describes it; an unknown model gets conservative defaults that
      send no parameter a model might refuse;
    - ``reasoning``: whether it thinks before answering;
    - ``efforts``: the effort names it takes (OpenAI ``reasoning_effort``, Anthropic ``output_config.effort`` with
      adaptive thinking, Gemini 3 ``thinkingLevel``), in increasing order;
    - ``budget`` / ``budget_min`` / ``budget_max``: whether it takes a thinking budget in tokens, and its range;
    - ``adaptive``: Anthropic's adaptive thinking (``thinking: {type: adaptive}``);
    - ``thinking_off``: whether thinking can be turned off; ``thinking_default``: whether it thinks when not told;
    - ``sampling``: whether it takes ``temperature`` / ``top_p``; ``stop``: stop sequences;
      ``parallel_tool_calls``: the ``parallel_tool_calls`` switch;
    - ``tools``, ``structured_output``: tool calling and JSON-schema output;
    - ``max_output_tokens``, ``context_window``: limits in tokens;
    - ``price``: list prices (``None``: unknown);
    - ``deprecation_date``: when the provider retires it;
    - ``prompt_cache_min_tokens``: the shortest prompt prefix the provider caches;
    - ``source``: where this came from (the catalogue and its date, an override, or defaults).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    known: bool = True
    reasoning: bool = False
    efforts: tuple[Effort, ...] = ()
    budget: bool = False
    budget_min: int | None = None
    budget_max: int | None = None
    adaptive: bool = False
    thinking_off: bool = True
    thinking_default: bool = False
    sampling: bool = True
    stop: bool = True
    parallel_tool_calls: bool = True
    tools: bool = True
    structured_output: bool = True
    max_output_tokens: int | None = None
    context_window: int | None = None
    price: Price | None = None
    deprecation_date: dt.date | None = None
    prompt_cache_min_tokens: int | None = None
    source: str = ""

    def closest_effort(self, wanted: str) -> Effort | None:
        """The effort this model takes nearest to ``wanted`` (ties go up); ``None`` when it takes none.

        Example:
            >>> ModelInfo(model="m", efforts=("low", "high")).closest_effort("medium")
            'high'
            >>> ModelInfo(model="m", efforts=("low", "medium", "high")).closest_effort("minimal")
            'low'
        """
        if not self.efforts:
            return None
        order = list(EFFORT_ORDER)
        rank = order.index(wanted) if wanted in order else order.index("medium")
        return min(self.efforts, key=lambda e: (abs(order.index(e) - rank), -order.index(e)))

    def retired(self, today: dt.date | None = None) -> bool:
        """Whether the provider has retired the model by ``today`` (default: the current date)."""
        return self.deprecation_date is not None and self.deprecation_date <= (today or dt.date.today())

    def describe(self) -> dict[str, Any]:
        """A flat, JSON-ready view of the capabilities, for listing."""
        return self.model_dump(mode="json", exclude={"price"}) | {
            "price": self.price.model_dump() if self.price else None
        }


#: Effort names from least to most thinking.
EFFORT_ORDER: tuple[Effort, ...] = ("none", "minimal", "low", "medium", "high", "xhigh", "max")


class ModelOverride(BaseModel):
    """A user's correction of :class:`ModelInfo` for one model: every field given replaces the catalogue's.

    Example (TOML)::

        [models."openai:gpt-5.9-preview"]
        reasoning = true
        efforts = ["low", "medium", "high"]
        sampling = false
        price = { input = 2.0, output = 8.0, cached_input = 0.2 }
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    reasoning: bool | None = None
    efforts: tuple[Effort, ...] | None = None
    budget: bool | None = None
    budget_min: int | None = None
    budget_max: int | None = None
    adaptive: bool | None = None
    thinking_off: bool | None = None
    thinking_default: bool | None = None
    sampling: bool | None = None
    stop: bool | None = None
    parallel_tool_calls: bool | None = None
    tools: bool | None = None
    structured_output: bool | None = None
    max_output_tokens: int | None = None
    context_window: int | None = None
    price: Price | None = None
    deprecation_date: dt.date | None = None
    prompt_cache_min_tokens: int | None = None

    def apply(self, info: ModelInfo) -> ModelInfo:
        """``info`` with this override's fields in place; the result counts as known."""
        given = {name: getattr(self, name) for name in self.model_fields_set}
        return info.model_copy(update={**given, "known": True, "source": f"{info.source} + override".lstrip(" +")})
