"""The adapter protocol: a canonical request in, a canonical response out.

An adapter translates :class:`ModelRequest` into one provider's wire format and the provider's answer back into a
:class:`ModelResponse`, normalising usage and mapping failures to the
:class:`~delta_eval.exceptions.ProviderError` classes (which say whether a retry may help). It does not retry,
rate-limit or cache: :class:`~delta_eval.adapters.client.ModelClient` does that once, for every provider.

Example (a whole adapter)::

    class EchoAdapter(ModelAdapter):
        async def generate(self, request: ModelRequest) -> ModelResponse:
            last = request.messages[-1].content or ""
            return ModelResponse(message=Message(role="assistant", content=last), finish_reason="stop")
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from delta_eval.schema import Message, ToolSpec, Usage

__all__ = [
    "FinishReason",
    "GenerateParams",
    "ModelAdapter",
    "ModelRequest",
    "ModelResponse",
    "split_model_id",
]

FinishReason = Literal["stop", "tool_calls", "length", "content_filter", "other"]


def split_model_id(model: str) -> tuple[str, str]:
    """``"openai:gpt-4o"`` -> ``("openai", "gpt-4o")``."""
    prefix, sep, name = model.partition(":")
    return (prefix, name) if sep else ("", model)


class GenerateParams(BaseModel):
    """Sampling and output parameters, in provider-neutral terms; ``extra`` passes provider-specific ones through.

    ``None`` means "the provider's default".
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    seed: int | None = None
    stop: tuple[str, ...] | None = None
    reasoning_effort: str | None = None
    tool_choice: str | None = None
    extra: dict[str, Any] = Field(default_factory=dict)


class ModelRequest(BaseModel):
    """A canonical request: the model, the messages, the tools offered and the parameters."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    params: GenerateParams = GenerateParams()

    def cache_key(self, *, namespace: str = "", identity: dict[str, Any] | None = None) -> str:
        """A stable hash of everything that determines the answer, with ``namespace`` (which side of which pair)
        and the adapter's ``identity`` (see :meth:`ModelAdapter.cache_identity`).

        Two requests with the same key are the same call: it is what the response cache is keyed by.
        """
        # pydantic's own JSON (fields in declaration order) is stable and far cheaper than json.dumps over
        # model_dump on large contexts; the key is computed for every call.
        head = json.dumps([namespace, identity or {}], sort_keys=True, separators=(",", ":"), default=str)
        digest = hashlib.sha256(head.encode("utf-8"))
        digest.update(b"\x00")
        digest.update(self.model_dump_json().encode("utf-8"))
        return digest.hexdigest()


class ModelResponse(BaseModel):
    """A canonical response: the assistant message, why it stopped, normalised usage and timing."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    message: Message
    finish_reason: FinishReason = "stop"
    usage: Usage = Usage()
    latency_ms: float = 0.0
    ttft_ms: float | None = None
    served_model: str = ""


class ModelAdapter(ABC):
    """Base of every provider adapter. Subclasses implement :meth:`generate`.

    ``model`` is the full model id (``"openai:gpt-4o"``); ``max_concurrency`` and ``requests_per_minute`` are the
    provider's sensible defaults, which a run's configuration may override.
    """

    max_concurrency: int = 8
    requests_per_minute: float | None = None

    def __init__(self, model: str) -> None:
        self.model = model

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
