"""A scripted adapter for tests: answers come from a list, or from a function of the request.

The list may hold assistant :class:`~delta_eval.schema.Message` objects, plain strings (a text reply), or
exceptions (raised instead of answering, e.g. a :class:`~delta_eval.exceptions.RateLimitError`). Every request is
kept in ``requests`` so a test can check exactly what was sent.

Example:
    >>> import anyio
    >>> from delta_eval.calls import ModelRequest
    >>> from delta_eval.schema import Message
    >>> model = ScriptedAdapter("scripted:m", ["hello"])
    >>> anyio.run(model.generate, ModelRequest(model="scripted:m", messages=(Message(role="user", content="hi"),))
    ...           ).message.content
    'hello'
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from delta_eval.adapters.base import ModelAdapter
from delta_eval.calls import ModelRequest, ModelResponse
from delta_eval.schema import Message, ToolCall, Usage

__all__ = ["ScriptedAdapter", "tool_call_message"]

Script = Iterable[Message | str | BaseException] | Callable[[ModelRequest], Message | str]


def tool_call_message(name: str, arguments: str = "{}", call_id: str = "call_1", text: str | None = None) -> Message:
    """An assistant message making one tool call."""
    return Message(role="assistant", content=text, tool_calls=(ToolCall(id=call_id, name=name, arguments=arguments),))


class ScriptedAdapter(ModelAdapter):
    """Answers from a script; runs out with an ``IndexError`` naming the request count."""

    def __init__(self, model: str, script: Script, usage: Usage | None = None) -> None:
        super().__init__(model)
        self._fn: Callable[[ModelRequest], Any] | None = script if callable(script) else None
        self._items = [] if callable(script) else list(script)
        self.usage = usage or Usage(input_tokens=10, output_tokens=5)
        self.requests: list[ModelRequest] = []

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """The next scripted answer."""
        self.requests.append(request)
        if self._fn is not None:
            item = self._fn(request)
        else:
            if not self._items:
                raise IndexError(f"{self.model}: script exhausted after {len(self.requests) - 1} answers")
            item = self._items.pop(0)
        if isinstance(item, BaseException):
            raise item
        message = Message(role="assistant", content=item) if isinstance(item, str) else item
        return ModelResponse(
            message=message,
            finish_reason="tool_calls" if message.tool_calls else "stop",
            usage=self.usage,
            served_model=self.model,
        )
