"""Apply a variant to a replay point: the messages, tools and parameters of the first request of the turn.

Only the point's context goes in, never its recorded answer. In order: the system prompt is replaced (a template
filled from the conversation's metadata), the tool surface is replaced, then the variant's render function, if
any, builds the final message list from a :class:`RenderInput`.

Example:
    >>> fill_template("Today is {{date}}. {{recorded_system_prompt}}", {"date": "May 15"}, "Be kind.")
    'Today is May 15. Be kind.'
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from delta_eval.calls import ModelRequest
from delta_eval.chat_format import parse_messages
from delta_eval.exceptions import RecordError
from delta_eval.paths import MISSING, get_path
from delta_eval.schema import Message, ReplayPoint, ToolSpec
from delta_eval.variant import Variant

__all__ = ["RenderInput", "build_request", "fill_template"]

_VAR = re.compile(r"\{\{\s*([A-Za-z_][\w.]*)\s*\}\}")


class RenderInput(BaseModel):
    """What a render function receives: the context (system prompt already applied), the tools and the metadata."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...]
    metadata: dict[str, Any] = Field(default_factory=dict)
    conversation_id: str
    turn_index: int
    variant: str


def fill_template(template: str, metadata: Mapping[str, Any], recorded_system_prompt: str | None) -> str:
    """Fill ``{{name}}`` placeholders from ``metadata`` (dotted paths allowed) and ``{{recorded_system_prompt}}``.

    A placeholder with no value raises ``KeyError`` naming it. Single braces are left alone, so JSON examples in a
    prompt need no escaping.
    """

    def sub(match: re.Match[str]) -> str:
        name = match.group(1)
        if name == "recorded_system_prompt":
            return recorded_system_prompt or ""
        value = get_path(metadata, name)
        if value is MISSING or value is None:
            raise KeyError(name)
        return str(value)

    return _VAR.sub(sub, template)


def _with_system_prompt(messages: Sequence[Message], prompt: str) -> tuple[Message, ...]:
    rest = [m for m in messages if m.role != "system"]
    return (Message(role="system", content=prompt), *rest)


def build_request(point: ReplayPoint, variant: Variant, source: str = "") -> ModelRequest:
    """The request that starts the replay of ``point`` under ``variant``.

    Raises :class:`RecordError` (naming the conversation and the field) when the variant cannot apply to this
    conversation: a template variable it lacks, or a render function that fails.
    """
    record = f"conversation {point.conversation_id}, turn {point.turn_index}"
    messages: Sequence[Message] = point.context
    if variant.system_prompt is not None:
        recorded = next((m.content for m in messages if m.role == "system"), None)
        try:
            prompt = fill_template(variant.system_prompt, point.metadata, recorded)
        except KeyError as exc:
            raise RecordError(
                source,
                record,
                f"metadata.{exc.args[0]}",
                f"variant {variant.name!r}: the system prompt template needs {{{{{exc.args[0]}}}}}, "
                "which this conversation's metadata does not have",
            ) from None
        messages = _with_system_prompt(messages, prompt)
    tools = variant.tools if variant.tools is not None else point.tools
    if variant.render is not None:
        inp = RenderInput(
            messages=messages,
            tools=tools,
            metadata=point.metadata,
            conversation_id=point.conversation_id,
            turn_index=point.turn_index,
            variant=variant.name,
        )
        try:
            rendered = variant.render(inp)
            if not isinstance(rendered, Sequence) or isinstance(rendered, str):
                raise TypeError(f"must return a list of messages, returned {type(rendered).__name__}")
            if not all(isinstance(m, Message) for m in rendered):
                rendered = parse_messages(
                    [m.model_dump() if isinstance(m, Message) else m for m in rendered],
                    source=source,
                    record=record,
                    field="render()",
                )
            messages = tuple(rendered)
        except RecordError:
            raise
        except Exception as exc:  # a user's function: its failure is this pair's error, not the run's
            raise RecordError(
                source,
                record,
                "render",
                f"variant {variant.name!r}: render function failed: {type(exc).__name__}: {exc}",
            ) from None
    # Every part is validated already (the conversation's messages, the variant's tools and parameters): building
    # the request without validating the history again keeps a long conversation's requests from costing
    # quadratic time.
    return ModelRequest.model_construct(
        model=variant.model, messages=tuple(messages), tools=tools, params=variant.params
    )
