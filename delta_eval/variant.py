"""One side of the comparison: a model and what a variant changes around it (prompt, parameters, tools, rendering).

It sits below :mod:`delta_eval.config` because the replay stage applies it (:mod:`delta_eval.replay.render`) and
must not depend on the whole run configuration.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_serializer, field_validator

from delta_eval.adapters.limits import ModelLimits
from delta_eval.callables import callable_name, resolve_callable
from delta_eval.calls import GenerateParams
from delta_eval.chat_format import load_tools
from delta_eval.redact import redact_secrets
from delta_eval.schema import ToolSpec

__all__ = ["Renderer", "Variant"]

#: A render function: takes a :class:`~delta_eval.replay.render.RenderInput`, returns the messages to send.
Renderer = Callable[..., Any]


class Variant(BaseModel):
    """One side of the comparison: a model and what to change around it.

    - ``model``: ``"prefix:name"``, e.g. ``"openai:gpt-4o"`` or ``"simulated:candidate"``.
    - ``system_prompt``: replaces the recorded system prompt. ``{{name}}`` is filled from the conversation's
      metadata (dotted paths allowed), ``{{recorded_system_prompt}}`` is the recorded one.
    - ``params``: temperature, max_tokens, reasoning_effort, ... (``None`` keeps the provider default).
    - ``tools``: replaces the recorded tool surface (a list of specs or a JSON file path).
    - ``render``: a function (or ``"module:function"``) taking a :class:`~delta_eval.replay.render.RenderInput`
      and returning the messages to send, for teams whose prompt is built by code.
    - ``provider_options``: passed to the adapter (base URL, API-key variable, simulated behaviours, ...).
    - ``limits``: this model's concurrency and rate limits.

    Example:
        >>> Variant(model="simulated:candidate", system_prompt="Be brief. {{recorded_system_prompt}}").model
        'simulated:candidate'
    """

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    model: str
    name: str = ""
    system_prompt: str | None = None
    params: GenerateParams = GenerateParams()
    tools: tuple[ToolSpec, ...] | None = None
    render: Renderer | None = None
    provider_options: dict[str, Any] = Field(default_factory=dict)
    limits: ModelLimits = ModelLimits()

    @field_validator("model")
    @classmethod
    def _has_prefix(cls, value: str) -> str:
        if ":" not in value:
            raise ValueError(f"model {value!r} needs a provider prefix, as in 'openai:gpt-4o' or 'simulated:baseline'")
        return value

    @field_validator("tools", mode="before")
    @classmethod
    def _load_tools(cls, value: Any) -> Any:
        return None if value is None else load_tools(value)

    @field_validator("render", mode="before")
    @classmethod
    def _resolve_render(cls, value: Any) -> Any:
        return None if value is None else resolve_callable(value, "render function")

    @field_serializer("provider_options")
    def _without_secrets(self, value: dict[str, Any]) -> dict[str, Any]:
        # Manifests and reports serialise the config: a key given inline must never reach them.
        redacted: dict[str, Any] = redact_secrets(value)
        return redacted

    @field_serializer("render")
    def _render_name(self, value: Renderer | None) -> str | None:
        return None if value is None else callable_name(value)

    def describe(self) -> str:
        """A one-line summary of what this variant changes."""
        parts = [self.model]
        if self.system_prompt is not None:
            parts.append("system prompt replaced")
        changed = redact_secrets(self.params.model_dump(mode="json", exclude_defaults=True))
        if changed:
            parts.append(", ".join(f"{k}={v}" for k, v in changed.items()))
        if self.tools is not None:
            parts.append(f"{len(self.tools)} tools")
        if self.render is not None:
            parts.append(f"render={callable_name(self.render)}")
        return "; ".join(parts)
