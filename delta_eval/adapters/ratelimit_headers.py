"""What a provider's rate-limit headers say about its request limit, and a way for an adapter to hand them on.

OpenAI (and Azure, and most OpenAI-compatible servers) send ``x-ratelimit-limit-requests``,
``x-ratelimit-remaining-requests`` and ``x-ratelimit-reset-requests`` (a duration such as ``1s``, ``6m0s`` or
``20ms``: the time until the limit is whole again); Anthropic sends ``anthropic-ratelimit-requests-limit``,
``-remaining`` and ``-reset`` (an RFC 3339 time). Either may send ``retry-after`` (or ``retry-after-ms``) with a 429.
:func:`read_rate_limit` reads all of them into one :class:`RateLimitSignal`.

Adapters see the headers; the :class:`~delta_eval.adapters.limits.ModelLimiter` acts on them. Between the two,
:func:`report_headers` (called by :func:`~delta_eval.adapters.errors.status_error`, by the ``simulated:`` model,
and for every response the SDK clients receive by the HTTP hook of :func:`header_hooks`) drops them into the sink
that :class:`~delta_eval.adapters.client.ModelClient` opens around one call with :func:`collect_headers`; outside
such a call it does nothing.

Example:
    >>> s = read_rate_limit({"x-ratelimit-limit-requests": "600", "x-ratelimit-remaining-requests": "0",
    ...                      "x-ratelimit-reset-requests": "1.5s"})
    >>> s.limit, s.remaining, s.reset_s, s.exhausted
    (600.0, 0.0, 1.5, True)
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

__all__ = [
    "RateLimitSignal",
    "collect_headers",
    "header_hooks",
    "parse_duration",
    "read_rate_limit",
    "report_headers",
    "retry_after",
]

_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|us|µs|ns|h|m|s)")


@dataclass(frozen=True)
class RateLimitSignal:
    """A provider's word on its request limit: ``limit`` requests (per its window), ``remaining`` of them now,
    ``reset_s`` seconds until the whole limit is back, ``retry_after`` seconds to wait (a 429's). Unknown: ``None``."""

    limit: float | None = None
    remaining: float | None = None
    reset_s: float | None = None
    retry_after: float | None = None

    @property
    def exhausted(self) -> bool:
        """Whether the provider says no request is left."""
        return self.remaining is not None and self.remaining < 1

    @property
    def refill_per_s(self) -> float | None:
        """Requests the limit gets back per second, where the headers tell (the used part comes back over
        ``reset_s``, as a token bucket's does)."""
        if self.limit is None or self.remaining is None or not self.reset_s or self.remaining >= self.limit:
            return None
        return (self.limit - self.remaining) / self.reset_s


def parse_duration(text: str) -> float | None:
    """Seconds in a duration header: a number of seconds, or Go-style ``1h2m3.5s`` / ``20ms``.

    Example:
        >>> parse_duration("6m0s"), parse_duration("20ms"), parse_duration("2"), parse_duration("soon")
        (360.0, 0.02, 2.0, None)
    """
    text = text.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    parts = _PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(n) * _UNITS[u] for n, u in parts)


def _until(text: str, now: datetime | None) -> float | None:
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return parse_duration(text)
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def _number(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        return None


def read_rate_limit(headers: Mapping[str, str] | None, *, now: datetime | None = None) -> RateLimitSignal | None:
    """The request-limit signal in ``headers`` (OpenAI's or Anthropic's, and ``retry-after``); ``None`` when they
    say nothing about it."""
    if not headers:
        return None
    lower = {k.lower(): v for k, v in headers.items()}
    if _READ.isdisjoint(lower):
        return None  # nothing about limits (a self-hosted server says none): the signal would be empty
    limit = _number(lower.get("x-ratelimit-limit-requests") or lower.get("anthropic-ratelimit-requests-limit"))
    remaining = _number(
        lower.get("x-ratelimit-remaining-requests") or lower.get("anthropic-ratelimit-requests-remaining")
    )
    reset: float | None = None
    if (value := lower.get("x-ratelimit-reset-requests")) is not None:
        reset = parse_duration(value)
    elif (value := lower.get("anthropic-ratelimit-requests-reset")) is not None:
        reset = _until(value, now)
    signal = RateLimitSignal(limit, remaining, reset, retry_after(lower))
    return None if signal == RateLimitSignal() else signal


#: Every header :func:`read_rate_limit` reads (lower case).
_READ = frozenset({
    "x-ratelimit-limit-requests", "anthropic-ratelimit-requests-limit", "x-ratelimit-remaining-requests",
    "anthropic-ratelimit-requests-remaining", "x-ratelimit-reset-requests", "anthropic-ratelimit-requests-reset",
    "retry-after-ms", "retry-after",
})  # fmt: skip


def retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds the provider asked to wait (``retry-after-ms`` first, then ``retry-after``), if it said.

    Example:
        >>> retry_after({"retry-after": "7"}), retry_after({"retry-after-ms": "250"}), retry_after({})
        (7.0, 0.25, None)
    """
    if not headers:
        return None
    lower = {k.lower(): v for k, v in headers.items()}
    if "retry-after-ms" in lower:
        try:
            return max(0.0, float(lower["retry-after-ms"]) / 1000)
        except ValueError:
            pass
    value = lower.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


_sink: ContextVar[list[RateLimitSignal] | None] = ContextVar("delta_eval_rate_limit_sink", default=None)


def report_headers(headers: Mapping[str, str] | None) -> None:
    """Hand a response's headers to the call collecting them (see :func:`collect_headers`), if any."""
    sink = _sink.get()
    if sink is not None and (signal := read_rate_limit(headers)) is not None:
        sink.append(signal)


@contextmanager
def collect_headers() -> Iterator[list[RateLimitSignal]]:
    """Collect the rate-limit signals reported while the block runs (in this task), last one last."""
    sink: list[RateLimitSignal] = []
    token = _sink.set(sink)
    try:
        yield sink
    finally:
        _sink.reset(token)


async def _report_response(response: Any) -> None:
    report_headers(response.headers)


def header_hooks() -> dict[str, list[Any]]:
    """``event_hooks`` for the SDKs' HTTP client: every response's rate-limit headers, successful ones included,
    reach the call's limiter (the SDKs' typed answers do not expose their headers).

    Example:
        >>> list(header_hooks())
        ['response']
    """
    return {"response": [_report_response]}
