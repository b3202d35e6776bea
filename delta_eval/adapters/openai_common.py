"""What the OpenAI-family adapters share (Chat Completions, Responses, Azure, OpenAI-compatible servers): options,
the ``openai`` client with its own retries off, error mapping, and the rules of reasoning models.

Reasoning models (o-series, gpt-5 except its chat variants) take ``max_completion_tokens`` and refuse sampling
parameters other than their defaults; a variant that sets ``temperature`` or ``top_p`` for one gets them dropped,
with a note in the run's manifest, instead of a 400 on every call. ``reasoning_model`` overrides the guess by name.
"""

from __future__ import annotations

import re
from typing import Any, Literal

import openai
from openai._types import RequestOptions

from delta_eval.adapters.base import JSON_HEADERS, tls_context
from delta_eval.adapters.errors import connection_error, status_error
from delta_eval.adapters.options import ProviderOptions
from delta_eval.calls import GenerateParams, ReasoningEffort
from delta_eval.exceptions import ProviderError, TransientError

__all__ = [
    "REQUEST_OPTIONS",
    "OpenAIOptions",
    "effort_for_budget",
    "is_reasoning_model",
    "make_client",
    "map_openai_error",
]

#: How the adapters call the SDK: ``client.post()`` with the body built here, authenticated as the typed methods
#: are. The typed ``create()`` first walks the whole body against its parameter types (``maybe_transform``), which
#: costs several milliseconds of CPU per call on agent-sized contexts and changes nothing for plain JSON; the
#: request, authentication, Azure's routing, errors and the typed response are the SDK's either way.
REQUEST_OPTIONS: RequestOptions = {"security": {"bearer_auth": True}, "headers": JSON_HEADERS}

_REASONING = re.compile(r"^(o\d+|gpt-5(?!.*chat))", re.I)


class OpenAIOptions(ProviderOptions):
    """Options of ``openai:`` and ``openai-responses:`` models (and those of
    :class:`~delta_eval.adapters.options.ProviderOptions`).

    - ``organization``, ``project``: sent as OpenAI's headers;
    - ``reasoning_model``: whether the model is a reasoning model (default: guessed from its name);
    - ``max_tokens_field``: how the output budget is sent; ``max_completion_tokens`` for OpenAI and Azure,
      ``max_tokens`` by default for other servers (``base_url`` set), which mostly still speak it;
    - ``prompt_cache_key``: send a replayed conversation's key as ``prompt_cache_key``, so its turns reach the same
      prompt cache (default: to OpenAI itself, not to other servers or Azure).
    """

    organization: str | None = None
    project: str | None = None
    reasoning_model: bool | None = None
    max_tokens_field: Literal["max_completion_tokens", "max_tokens"] | None = None
    prompt_cache_key: bool | None = None


def is_reasoning_model(name: str, options: OpenAIOptions) -> bool:
    """Whether ``name`` is a reasoning model (o-series, gpt-5), unless the options say otherwise."""
    return options.reasoning_model if options.reasoning_model is not None else bool(_REASONING.match(name))


def effort_for_budget(budget: int) -> ReasoningEffort:
    """The reasoning effort closest to a thinking budget in tokens, for providers that take only an effort."""
    if budget == 0:
        return "minimal"
    return "low" if budget <= 2048 else "medium" if budget <= 8192 else "high"


def make_client(options: OpenAIOptions, model: str, *, env: str | None = "OPENAI_API_KEY") -> openai.AsyncOpenAI:
    """An ``AsyncOpenAI`` client with the SDK's retries off (the run's policy retries, once)."""
    # An OpenAI-compatible server (vLLM, Ollama, a proxy) may need no key; the SDK still wants a non-empty one.
    key = options.key(env, model=model, required=options.base_url is None) or "unused"
    return openai.AsyncOpenAI(
        api_key=key,
        base_url=options.base_url,
        organization=options.organization,
        project=options.project,
        timeout=options.timeout,
        max_retries=0,
        default_headers=options.header_values() or None,
        http_client=openai.DefaultAsyncHttpxClient(verify=tls_context()),
    )


def sampling(
    params: GenerateParams, name: str, options: OpenAIOptions, note: Any, *, budget_field: str
) -> dict[str, Any]:
    """The sampling and length parameters every OpenAI endpoint shares, with the reasoning-model rules applied.

    ``budget_field`` is how the endpoint names the output budget; ``note`` says a dropped parameter once.
    """
    out: dict[str, Any] = {}
    reasoning = is_reasoning_model(name, options)
    for field in ("temperature", "top_p"):
        value = getattr(params, field)
        if value is None:
            continue
        if reasoning and value != 1:
            note(f"{field}={value} dropped: reasoning models take only their default")
            continue
        out[field] = value
    if params.max_tokens is not None:
        out[budget_field] = params.max_tokens
    effort = params.reasoning_effort
    if effort is None and params.reasoning_budget is not None:
        effort = effort_for_budget(params.reasoning_budget)
        note(f"reasoning_budget={params.reasoning_budget} sent as reasoning effort {effort!r} (OpenAI takes no budget)")
    if effort is not None:
        out["reasoning_effort"] = effort
    return out


def map_openai_error(exc: Exception, *, model: str, secrets: list[str]) -> ProviderError:
    """The :class:`~delta_eval.exceptions.ProviderError` for an exception of the ``openai`` SDK."""
    if isinstance(exc, openai.APIStatusError):
        body = exc.body if isinstance(exc.body, dict) else {}
        code = str(body.get("code") or body.get("type") or exc.code or "") or None
        message = exc.message + (f" (request id {exc.request_id})" if exc.request_id else "")
        return status_error(
            exc.status_code, message, model=model, headers=dict(exc.response.headers), code=code, secrets=secrets
        )
    if isinstance(exc, openai.APIConnectionError):  # timeouts included
        return connection_error(exc, model=model, secrets=secrets)
    if isinstance(exc, openai.APIError):  # an error event inside a stream: the provider failed mid-answer
        return TransientError(f"error inside the stream: {exc.message}", model=model)
    raise exc
