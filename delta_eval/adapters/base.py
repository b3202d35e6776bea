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

import functools
import itertools
import ssl
import urllib.parse
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from types import ModuleType
from typing import Any, Generic, TypeVar

import pydantic
import pydantic_core

from delta_eval.adapters.batch import BatchBackend
from delta_eval.adapters.kept_urls import kept_urls
from delta_eval.adapters.ratelimit_headers import header_hooks
from delta_eval.calls import ModelRequest, ModelResponse
from delta_eval.catalog import CATALOG_AS_OF, ModelInfo, ModelOverride, catalog_key, model_info
from delta_eval.exceptions import TransientError
from delta_eval.installed import installed

__all__ = [
    "JSON_HEADERS",
    "ClientShards",
    "ModelAdapter",
    "json_body",
    "sdk_client_options",
    "sdk_http_client",
    "tls_context",
    "typed_body",
]

C = TypeVar("C")
M = TypeVar("M", bound=pydantic.BaseModel)

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


def typed_body(cls: type[M], body: bytes, *, model: str) -> M:
    """An SDK's response type (``cls``, a model of the ``openai`` or ``anthropic`` SDK) read from a JSON ``body``.

    pydantic-core validates the body in one pass in Rust (13 us for a Chat Completion with a tool call), where the
    SDK's own reading walks its types in Python (``construct``: 236 us). A body the type does not fit (a server's own
    finish reason, a field left out) is read leniently, as the SDK reads every body; its extra fields are kept either
    way. A body that is not a JSON object is a failed call, worth another try.

    Example:
        >>> from openai.types.chat import ChatCompletion
        >>> body = b'{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,'
        >>> done = body + b'"finish_reason":"eos","message":{"role":"assistant","content":"hi"}}]}'
        >>> typed_body(ChatCompletion, done, model="openai:m").choices[0].finish_reason
        'eos'
    """
    try:
        return cls.model_validate_json(body)
    except pydantic.ValidationError:
        pass
    try:
        data = pydantic_core.from_json(body)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise TransientError(f"the response is not a JSON object: {body[:200]!r}", model=model)
    return cls.construct(**data)  # the SDKs' own lenient reading (their models override pydantic's construct)


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The TLS context every SDK client of the process shares, made as the SDKs' HTTP stack (httpx2) makes its
    default one (the system's trust store; ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` honoured). Making one costs ~23 ms,
    which each SDK client would otherwise pay again."""
    import httpx2  # the HTTP stack of the provider SDKs, installed with them

    return httpx2.create_ssl_context()


def sdk_http_client(sdk: ModuleType, base_url: str | None = None, **kwargs: Any) -> Any:
    """The HTTP client of an ``openai`` or ``anthropic`` SDK client: the SDK's ``DefaultAioHttpClient`` (httpx's
    client on aiohttp's transport: the SDK's request, hooks and errors stay, aiohttp's C parser and connection pool
    replace httpcore's, about a quarter less client CPU per call at 256 in flight) where aiohttp is installed, else its
    ``DefaultAsyncHttpxClient``. aiohttp runs on asyncio only, as every run does (``anyio.run``'s default).

    A ``base_url`` with credentials in it (``http://user:pass@host``) keeps httpx: aiohttp refuses them beside the
    SDK's own ``Authorization`` header, where httpx sends the SDK's header. Either keeps the URLs it joins
    (:func:`~delta_eval.adapters.kept_urls.kept_urls`).
    """
    if installed("aiohttp") and not (base_url and urllib.parse.urlsplit(base_url).username is not None):
        try:
            return kept_urls(sdk.DefaultAioHttpClient)(**kwargs)
        except RuntimeError:  # an SDK built without its aiohttp adapter says so only when one is made
            pass
    return kept_urls(sdk.DefaultAsyncHttpxClient)(**kwargs)


def sdk_client_options(options: Any, sdk: ModuleType) -> dict[str, Any]:
    """What every provider SDK client of the adapters is built with: the options' timeout and extra headers, the
    SDK's own retries off (the run's policy retries, once), and an HTTP client (:func:`sdk_http_client` of ``sdk``,
    the ``openai`` or ``anthropic`` module) on the shared TLS context whose responses hand their rate-limit headers
    to the call's limiter (:func:`~delta_eval.adapters.ratelimit_headers.header_hooks`)."""
    return {
        "timeout": options.timeout,
        "max_retries": 0,
        "default_headers": options.header_values() or None,
        "http_client": sdk_http_client(
            sdk, getattr(options, "base_url", None), verify=tls_context(), event_hooks=header_hooks()
        ),
    }


class ClientShards(Generic[C]):
    """Several SDK clients of one model, used in turn, each with its own connection pool.

    The HTTP stack under the SDKs (httpcore) looks at every connection of its pool, probing idle sockets, each time a
    request joins or leaves it: with 256 calls in flight through one client that costs more CPU per call than the
    rest of the call. Spread over ``count`` clients, each pool is ``count`` times smaller. A client is built on its
    first turn, so a run with few calls builds few.

    Example:
        >>> shards = ClientShards(lambda: object(), 3)
        >>> len(shards.clients), len({id(shards.next()) for _ in range(6)}), len(shards.clients)
        (1, 3, 3)
    """

    def __init__(self, make: Callable[[], C], count: int) -> None:
        self._make = make
        self.count = max(1, count)
        self.clients: list[C] = [make()]  # built now: a bad option or key fails before the run starts
        self._turn: Iterator[int] = itertools.cycle(range(self.count))

    @property
    def first(self) -> C:
        """One of the clients, for what they all share (base URL, options)."""
        return self.clients[0]

    def next(self) -> C:
        """The client of the next call."""
        k = next(self._turn)
        while len(self.clients) <= k:
            self.clients.append(self._make())
        return self.clients[k]


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
        #: What the catalogue says this model takes (see :meth:`use_catalogue`); the adapter sends nothing else.
        self.info: ModelInfo = model_info(model)

    def catalogue_hints(self) -> dict[str, Any]:
        """How to look this model up in the catalogue: ``base_model`` (the model an Azure deployment serves)."""
        return {}

    def use_catalogue(self, overrides: Mapping[str, ModelOverride]) -> ModelInfo:
        """Look the model up again with the run's ``overrides``, and say once when it is unknown or retired."""
        self.info = model_info(self.model, overrides, **self.catalogue_hints())
        if not self.info.known and catalog_key(self.model) is not None:
            self.note(
                f"{self.model} is not in the model catalogue of {CATALOG_AS_OF}: sampling, stop, parallel_tool_calls "
                "and reasoning parameters are not sent (a model may refuse any of them), and its cost is unknown; "
                f'describe it under `models` in the run\'s configuration (e.g. [models."{self.model}"] '
                "sampling = true) or update delta-eval to send them"
            )
        if self.info.retired():
            self.note(f"{self.model} was retired by its provider on {self.info.deprecation_date}: calls may fail")
        return self.info

    def note(self, text: str) -> None:
        """Say something a user should know about this model's calls once per run (a parameter the model does not
        take and was dropped, a tool schema simplified for the provider, ...); it goes into the run's manifest."""
        if text not in self.notes:
            self.notes.append(text)

    @abstractmethod
    async def generate(self, request: ModelRequest) -> ModelResponse:
        """Make one call. Raise a :class:`~delta_eval.exceptions.ProviderError` subclass on failure."""

    def batch_backend(self) -> BatchBackend | None:
        """The provider's batch API for this model (see :mod:`delta_eval.adapters.batch`); ``None``: it has none,
        and its calls are made one by one."""
        return None

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
