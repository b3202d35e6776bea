"""The dispatcher: a model id's prefix (``openai:``, ``simulated:`` ...) names the adapter that serves it.

Built-in adapters are imported only when first used, so a missing provider SDK matters only to runs that use that
provider. Third-party adapters register with :func:`register_adapter`, or through the ``delta_eval.adapters``
entry-point group (the entry point names the prefix and points at a factory).

Example:
    >>> "simulated" in known_prefixes()
    True
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from delta_eval.adapters.base import ModelAdapter
from delta_eval.adapters.recordings import RecordingIndex
from delta_eval.calls import split_model_id
from delta_eval.exceptions import ConfigError

__all__ = [
    "AdapterContext",
    "AdapterFactory",
    "create_adapter",
    "known_prefixes",
    "register_adapter",
    "registered_adapters",
    "unregister_adapter",
]


@dataclass(frozen=True)
class AdapterContext:
    """What a run offers adapters besides their options.

    ``recordings`` is the index of recorded conversations that the ``simulated:`` model answers from; a run builds
    it only when a side uses a ``simulated:`` model, and real providers ignore it.
    """

    recordings: RecordingIndex | None = None


AdapterFactory = Callable[[str, Mapping[str, Any], AdapterContext], ModelAdapter]

# prefix -> "module:factory"; imported on first use
_BUILTIN: dict[str, str] = {
    "simulated": "delta_eval.adapters.simulated:create",
}
_registered: dict[str, AdapterFactory] = {}


def register_adapter(prefix: str, factory: AdapterFactory) -> None:
    """Serve model ids ``"{prefix}:..."`` with ``factory(model_id, options, context)``."""
    if not prefix or ":" in prefix:
        raise ConfigError(f"an adapter prefix is a non-empty name without ':', not {prefix!r}")
    _registered[prefix] = factory


def unregister_adapter(prefix: str) -> None:
    """Forget the factory :func:`register_adapter` gave ``prefix`` (built-ins and plugins stay)."""
    _registered.pop(prefix, None)


@contextmanager
def registered_adapters() -> Iterator[None]:
    """Within the block, adapters may be registered freely; on leaving it, the registrations are as before.

    Example:
        >>> with registered_adapters():
        ...     register_adapter("echo", lambda model, options, context: None)
        >>> "echo" in known_prefixes()
        False
    """
    before = dict(_registered)
    try:
        yield
    finally:
        _registered.clear()
        _registered.update(before)


def _plugins() -> dict[str, Any]:
    return {ep.name: ep for ep in entry_points(group="delta_eval.adapters")}


def known_prefixes() -> list[str]:
    """Every prefix a model id may start with."""
    return sorted({*_BUILTIN, *_registered, *_plugins()})


def _factory(prefix: str) -> AdapterFactory | None:
    if prefix in _registered:
        return _registered[prefix]
    if prefix in _BUILTIN:
        module_name, _, attr = _BUILTIN[prefix].partition(":")
        factory: AdapterFactory = getattr(importlib.import_module(module_name), attr)
        return factory
    plugin = _plugins().get(prefix)
    if plugin is None:
        return None
    loaded: AdapterFactory = plugin.load()
    return loaded


def create_adapter(
    model: str, options: Mapping[str, Any] | None = None, context: AdapterContext | None = None
) -> ModelAdapter:
    """The adapter for ``model`` (``"prefix:name"``), built with provider ``options``."""
    prefix, name = split_model_id(model)
    if not prefix or not name:
        raise ConfigError(
            f"model {model!r} needs a provider prefix, as in 'simulated:baseline'; known prefixes: "
            + ", ".join(known_prefixes())
        )
    factory = _factory(prefix)
    if factory is None:
        raise ConfigError(
            f"unknown model prefix {prefix!r} in {model!r}; known prefixes: {', '.join(known_prefixes())}"
        )
    return factory(model, dict(options or {}), context or AdapterContext())
