"""What the OpenAI-family adapters share (Chat Completions, Responses, Azure, OpenAI-compatible servers): options,
the ``openai`` client with its own retries off, error mapping, and the per-model parameter rules.

Which parameters a model takes comes from the model catalogue (:mod:`delta_eval.catalog`), never from its name:
reasoning models take ``max_completion_tokens``, an effort from their own list, and refuse ``temperature``,
``top_p`` and ``stop``; a parameter a model does not take is dropped with a note in the run's manifest instead of
a 400 on every call. A model the catalogue does not know (a self-hosted one) gets none of them until the run
describes it (``models``).
"""

from __future__ import annotations

from typing import Any, Literal

import openai
from openai._models import FinalRequestOptions
from openai._types import RequestOptions

from delta_eval.adapters.base import JSON_HEADERS, sdk_client_options
from delta_eval.adapters.errors import connection_error, status_error
from delta_eval.adapters.kept_urls import kept_urls
from delta_eval.adapters.options import ProviderOptions
from delta_eval.adapters.thinking import refused, resolve_effort, wanted_effort
from delta_eval.calls import GenerateParams
from delta_eval.catalog import ModelInfo
from delta_eval.exceptions import ProviderError, TransientError

__all__ = [
    "REQUEST_OPTIONS",
    "OpenAIOptions",
    "make_client",
    "map_openai_error",
    "post_options",
]

#: How the adapters call the SDK: its ``client.request()`` with the options ``client.post()`` would make (see
#: :func:`post_options`) and the body built here, authenticated as the typed methods are. The typed ``create()``
#: first walks the whole body against its parameter types (``maybe_transform``), which costs several milliseconds
#: of CPU per call on agent-sized contexts and changes nothing for plain JSON; the request, authentication, Azure's
#: routing, errors and the typed response are the SDK's either way.
REQUEST_OPTIONS: RequestOptions = {"security": {"bearer_auth": True}, "headers": JSON_HEADERS}

#: The options of a POST to each path, as ``client.post(path, options=REQUEST_OPTIONS)`` makes them: made once.
_POSTS: dict[str, FinalRequestOptions] = {}


def post_options(path: str, content: bytes) -> FinalRequestOptions:
    """What ``client.post(path, content=content, options=REQUEST_OPTIONS)`` hands the SDK's ``client.request()``,
    made from a copy of the path's options rather than anew: the SDK's ``FinalRequestOptions.construct`` resolves
    the default of each of its fields on every call (~20 us; a copy ~3). Its header, security and query mappings
    are the call's own, as ``construct`` makes them (the SDK may set a refreshed key into the headers of a call's
    options; a hook may add to its query ``params``).
    """
    made = _POSTS.get(path)
    if made is None:
        made = _POSTS[path] = FinalRequestOptions.construct(
            method="post", url=path, json_data=None, content=None, files=None, **REQUEST_OPTIONS
        )
    own = {"content": content, "headers": dict(JSON_HEADERS), "security": dict(REQUEST_OPTIONS["security"])}
    options = made.model_copy(update={**own, "params": {}})
    # model_copy counts every updated field as set; post() leaves params at its default, so unset it again (the
    # copy's own set). Cheaper than model_copy(deep=True), which copies every field (~12 us).
    options.__pydantic_fields_set__.discard("params")
    return options


class OpenAIOptions(ProviderOptions):
    """Options of ``openai:`` and ``openai-responses:`` models (and those of
    :class:`~delta_eval.adapters.options.ProviderOptions`).

    - ``organization``, ``project``: sent as OpenAI's headers;
    - ``max_tokens_field``: how the output budget is sent: ``max_completion_tokens`` by default (OpenAI's field
      for every model, taken by current OpenAI-compatible servers too), ``max_tokens`` for an older server.;
    - ``prompt_cache_key``: send a replayed conversation's key as ``prompt_cache_key``, so its turns reach the same
      prompt cache (default: to OpenAI itself, not to other servers or Azure).
    """

    organization: str | None = None
    project: str | None = None
    max_tokens_field: Literal["max_completion_tokens", "max_tokens"] | None = None
    prompt_cache_key: bool | None = None


def make_client(options: OpenAIOptions, model: str, *, env: str | None = "OPENAI_API_KEY") -> openai.AsyncOpenAI:
    """An ``AsyncOpenAI`` client with the SDK's retries off (the run's policy retries, once), keeping the URLs it
    prepares (:func:`~delta_eval.adapters.kept_urls.kept_urls`; not Azure's client, whose URL follows the model)."""
    # An OpenAI-compatible server (vLLM, Ollama, a proxy) may need no key; the SDK still wants a non-empty one.
    key = options.key(env, model=model, required=options.base_url is None) or "unused"
    client: openai.AsyncOpenAI = kept_urls(openai.AsyncOpenAI)(
        api_key=key,
        base_url=options.base_url,
        organization=options.organization,
        project=options.project,
        **sdk_client_options(options, openai),
    )
    return client


def sampling(params: GenerateParams, info: ModelInfo, note: Any, *, budget_field: str) -> dict[str, Any]:
    """The sampling, length and effort parameters every OpenAI endpoint shares, as far as the model takes them.

    ``budget_field`` is how the endpoint names the output budget; ``note`` says a dropped parameter once.
    """
    out: dict[str, Any] = {}
    for field in ("temperature", "top_p"):
        value = getattr(params, field)
        if value is None:
            continue
        if not info.sampling:
            note(f"{field}={value} dropped: {refused(info, 'sampling parameters (temperature, top_p)')}")
            continue
        out[field] = value
    if params.max_tokens is not None:
        out[budget_field] = params.max_tokens
    wanted = wanted_effort(params, note)
    effort = resolve_effort(wanted, info, note) if wanted is not None else None
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
