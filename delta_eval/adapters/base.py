"""The adapter protocol: a canonical request in, a canonical response out.

An adapter translates a :class:`~delta_eval.calls.ModelRequest` into one provider's wire format and the provider's
answer back into a :class:`~delta_eval.calls.ModelResponse`, normalising usage and mapping failures to the
:class:`~delta_eval.exceptions.ProviderError` classes (which say whether a retry may help). It does not retry,
rate-limit or cache: :class:`~delta_eval.adapters.client.ModelClient` does that once, for every provider.

Example (a whole adapter)::

    class EchoAdapter(ModelAdapter):
        async def generate(self, request: ModelRequest) -> ModelResponse:
            last = request.messages[-1].content or ""
            return ModelResponse(message=Message(role="assistant", content=last), finish_reason="stop")
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

import pydantic_core

from delta_eval.calls import ModelRequest, ModelResponse

__all__ = ["JSON_HEADERS", "ModelAdapter", "json_body"]

#: The header of a request whose body :func:`json_body` encoded.
JSON_HEADERS = {"Content-Type": "application/json"}


def json_body(body: Mapping[str, Any]) -> bytes:
    """A request body as JSON bytes, for an SDK's ``post(content=...)``.

    pydantic-core's serialiser is about three times faster than the standard library's on agent-sized contexts
    (34 vs 99 us for the tau-bench requests), and the body is encoded on every call.

    Example:
        >>> json_body({"model": "m", "messages": [{"role": "user", "content": "héllo"}]})
        b'{"model":"m","messages":[{"role":"user","content":"h\xc3\xa9llo"}]}'
    """
    return pydantic_core.to_json(body)


class ModelAdapter(ABC):
    """Base of every provider adapter. Subclasses implement :meth:`generate`.

    ``model`` is the full model id (``"openai:gpt-4o"``); ``max_concurrency`` and ``requests_per_minute`` are the
    provider's sensible defaults, which a run's configuration may override.
    """

    max_concurrency: int = 8
    requests_per_minute: float | None = None

    def __init__(self, model: str) -> None:
        self.model = model
        self.notes: list[str] = []

    def note(self, text: str) -> None:
        """Say something a user should know about this model's calls once per run (a parameter the model does not
        take and was dropped, a tool schema simplified for the provider, ...); it goes into the run's manifest."""
        if text not in self.notes:
            self.notes.append(text)

    @abstractmethod
    async def generate(self, request: ModelRequest) -> ModelResponse:
        """Make one call. Raise a :class:`~delta_eval.exceptions.ProviderError` subclass on failure."""

    def cache_identity(self) -> dict[str, Any]:
        """What, besides the request, decides this adapter's answers (an endpoint, a deployment, ...).

        It is part of every response-cache key, so that two configurations of one model id never share answers.
        Never put credentials here.
        """
        return {}

    async def aclose(self) -> None:  # noqa: B027 - optional hook, most adapters hold nothing to close
        """Release connections. Called once when the run ends."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.model!r})"
