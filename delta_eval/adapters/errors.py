"""From a provider's failure to the :class:`~delta_eval.exceptions.ProviderError` class that says whether to retry.

Every adapter turns its SDK's exceptions into these through :func:`status_error` (an HTTP status with the
provider's message and headers) or :func:`connection_error` (no response at all), so the retry rules are written
once: 408, 409, 429 and 5xx (Anthropic's 529 included) and lost connections are retried; 400, 401, 403, 404 and
422 are not; a ``x-should-retry`` header, where a provider sends one, overrides the status. The wait a provider asks
for comes from ``retry-after-ms`` or ``retry-after`` (seconds or an HTTP date).

Messages are the provider's own, with any credential the adapter holds replaced by ``***``.

Example:
    >>> err = status_error(429, "slow down", model="openai:gpt-4o", headers={"retry-after-ms": "1500"})
    >>> type(err).__name__, err.retryable, err.retry_after
    ('RateLimitError', True, 1.5)
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from delta_eval.adapters.ratelimit_headers import report_headers, retry_after
from delta_eval.exceptions import (
    AuthenticationError,
    BadRequestError,
    ContentFilterError,
    ContextLengthError,
    ProviderError,
    RateLimitError,
    TransientError,
)
from delta_eval.redact import redact_text

__all__ = ["connection_error", "is_transport_error", "retry_after", "scrub", "sdk_errors", "status_error"]

_CONTEXT = re.compile(r"context[_ ]length|context window|too many tokens|prompt is too long|maximum context", re.I)
_FILTER = re.compile(r"content[_ ]filter|content management policy|responsible ai|safety", re.I)


def scrub(text: str, secrets: Iterable[str | None]) -> str:
    """``text`` with every non-empty secret in it replaced by ``***``, and whatever looks like one (URL userinfo,
    key-shaped strings: see :func:`~delta_eval.redact.redact_text`)."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return redact_text(text)


def status_error(
    status: int,
    message: str,
    *,
    model: str,
    headers: Mapping[str, str] | None = None,
    code: str | None = None,
    secrets: Iterable[str | None] = (),
) -> ProviderError:
    """The error for an HTTP ``status`` answer; ``code`` is the provider's error code or type when it gave one."""
    text = scrub(f"HTTP {status}: {message}", secrets)
    report_headers(headers)  # to the limiter of the call under way, if any
    wait = retry_after(headers)
    should_retry = {k.lower(): v for k, v in (headers or {}).items()}.get("x-should-retry")
    described = f"{code or ''} {message}"
    kind: type[ProviderError]
    if status == 429:
        kind = RateLimitError
    elif status in (408, 409) or status >= 500:
        kind = TransientError
    elif status in (401, 403):
        kind = AuthenticationError
    elif _CONTEXT.search(described):
        kind = ContextLengthError
    elif status == 400 and _FILTER.search(described):
        kind = ContentFilterError
    elif 400 <= status < 500:
        kind = BadRequestError
    else:
        kind = ProviderError
    if should_retry == "true" and not kind.retryable:
        kind = TransientError
    elif should_retry == "false" and kind.retryable:
        kind = ProviderError
    return kind(text, model=model, status=status, retry_after=wait)


def is_transport_error(exc: BaseException) -> bool:
    """Whether ``exc`` is the HTTP stack failing under an SDK (a connection refused, reset or dropped mid-stream).

    The SDKs wrap most of these in their own errors, but not every one: a stream cut mid-body can surface as the
    transport's own ``RemoteProtocolError``. Both ``httpx`` and its fork ``httpx2`` (and their ``httpcore``) count.
    """
    module = type(exc).__module__.split(".")[0]
    return module in ("httpx", "httpx2", "httpcore", "httpcore2") or isinstance(exc, ConnectionError | TimeoutError)


def connection_error(exc: BaseException, *, model: str, secrets: Iterable[str | None] = ()) -> TransientError:
    """The error for a call that got no response (refused, reset, timed out): always worth another try."""
    return TransientError(scrub(f"no response: {type(exc).__name__}: {exc}", secrets), model=model)


@contextlib.contextmanager
def sdk_errors(
    sdk_error: type[Exception],
    mapped: Callable[[Any], ProviderError],
    *,
    model: str,
    secrets: Callable[[], Iterable[str | None]] = tuple,
) -> Iterator[None]:
    """Within it, an SDK's error (``sdk_error``) is raised as ``mapped`` makes it, and the HTTP stack failing under
    the SDK as :func:`connection_error` (worth another try, its message scrubbed of ``secrets()``, asked only then):
    what every call to a provider's SDK does.

    Example:
        >>> for failure in (KeyError("k"), ConnectionResetError("reset")):
        ...     try:
        ...         with sdk_errors(KeyError, lambda e: ProviderError(f"mapped {e}", model="m"), model="m"):
        ...             raise failure
        ...     except ProviderError as exc:
        ...         print(type(exc).__name__, exc)
        ProviderError m: mapped 'k'
        TransientError m: no response: ConnectionResetError: reset
    """
    try:
        yield
    except sdk_error as exc:
        raise mapped(exc) from None
    except Exception as exc:
        if not is_transport_error(exc):
            raise
        raise connection_error(exc, model=model, secrets=secrets()) from None
