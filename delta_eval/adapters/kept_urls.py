"""The request URLs of the provider SDKs' clients, parsed once per client instead of on every call.

An SDK call turns its path (``/chat/completions``) into a URL twice before anything is sent: the SDK client joins
it to its base URL (``_prepare_url``: a parse and a copy), hands the result on as text, and its HTTP client
(httpx) parses that text again to join it to its own base URL (``_merge_url``). Both give the same URL for the same
text and base URL, and a URL is immutable: kept here by the text, for the base URL it was joined to (a client whose
base URL is set anew joins again). About 70 us of CPU a call (of some 165 that building the SDK's request takes).

Example:
    >>> import httpx2
    >>> client = kept_urls(httpx2.AsyncClient)(base_url="http://h/v1")
    >>> client._merge_url("/chat") is client._merge_url("/chat"), str(client._merge_url("/chat"))
    (True, 'http://h/v1/chat')
"""

from __future__ import annotations

import functools
from typing import Any, TypeVar

__all__ = ["kept_urls"]

T = TypeVar("T")

#: URLs kept per client: a client asks for a few paths (its endpoints); more are joined as before.
_ROOM = 64


def _kept(cache: dict[str, tuple[Any, Any]], url: Any, base: Any, join: Any) -> Any:
    hit = cache.get(url) if isinstance(url, str) else None
    if hit is not None and hit[0] is base:
        return hit[1]
    joined = join(url)
    if isinstance(url, str) and len(cache) < _ROOM:
        cache[url] = (base, joined)
    return joined


class _HTTPClientURLs:
    """An httpx client (``httpx2.AsyncClient`` or its SDK subclass) that keeps the URLs it joined."""

    _base_url: Any

    def _merge_url(self, url: Any) -> Any:
        cache = self.__dict__.setdefault("_kept_urls", {})
        return _kept(cache, url, self._base_url, super()._merge_url)  # type: ignore[misc]


class _SDKClientURLs:
    """An SDK client (``openai.AsyncOpenAI``, ``anthropic.AsyncAnthropic``) that keeps the URLs it prepared."""

    _base_url: Any

    def _prepare_url(self, url: str) -> Any:
        cache = self.__dict__.setdefault("_kept_urls", {})
        return _kept(cache, url, self._base_url, super()._prepare_url)  # type: ignore[misc]


@functools.cache
def kept_urls(cls: type[T]) -> type[T]:
    """``cls`` (an httpx client class or an SDK client class) keeping the URLs it joins: the same class otherwise,
    made once per class."""
    mixin = _SDKClientURLs if hasattr(cls, "_prepare_url") else _HTTPClientURLs
    return type(cls.__name__, (mixin, cls), {"__module__": __name__, "__doc__": cls.__doc__})
