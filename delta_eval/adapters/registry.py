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
import importlib.util
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

from delta_eval.adapters.base import ModelAdapter
from delta_eval.adapters.recordings import RecordingIndex
from delta_eval.calls import split_model_id
from delta_eval.catalog import ModelOverride
from delta_eval.exceptions import ConfigError
from delta_eval.installed import installed

__all__ = [
    "AdapterContext",
    "AdapterFactory",
    "adapter_modules",
    "check_available",
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
    it only when a side uses a ``simulated:`` model, and real providers ignore it. ``models`` are the run's
    corrections of the model catalogue (see :class:`~delta_eval.catalog.ModelOverride`).
    """

    recordings: RecordingIndex | None = None
    models: Mapping[str, ModelOverride] = field(default_factory=dict)


AdapterFactory = Callable[[str, Mapping[str, Any], AdapterContext], ModelAdapter]


@dataclass(frozen=True)
class _Builtin:
    factory: str  # "module:function", imported on first use
    sdk: str | None = None  # the provider SDK's import name
    extra: str | None = None  # the pip extra that installs it
    transport: str | None = None  # the HTTP transport its SDK client runs on where installed (base.sdk_http_client)


_BUILTIN: dict[str, _Builtin] = {
    "simulated": _Builtin("delta_eval.adapters.simulated:create"),
    "openai": _Builtin("delta_eval.adapters.openai_chat:create", "openai", "openai", "aiohttp"),
    "openai-responses": _Builtin("delta_eval.adapters.openai_responses:create", "openai", "openai", "aiohttp"),
    "azure": _Builtin("delta_eval.adapters.azure:create_chat", "openai", "openai", "aiohttp"),
    "azure-responses": _Builtin("delta_eval.adapters.azure:create_responses", "openai", "openai", "aiohttp"),
    "anthropic": _Builtin("delta_eval.adapters.anthropic:create", "anthropic", "anthropic", "aiohttp"),
    "gemini": _Builtin("delta_eval.adapters.gemini:create", "google.genai", "gemini"),
    "vertex": _Builtin("delta_eval.adapters.gemini_vertex:create", "google.genai", "vertex"),
    "anthropic-vertex": _Builtin("delta_eval.adapters.anthropic_vertex:create", "anthropic", "vertex", "aiohttp"),
    "anthropic-bedrock": _Builtin("delta_eval.adapters.anthropic_bedrock:create", "botocore", "bedrock", "aiohttp"),
    "bedrock": _Builtin("delta_eval.adapters.anthropic_bedrock:create", "botocore", "bedrock", "aiohttp"),
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


def _missing_sdk(prefix: str) -> ConfigError | None:
    builtin = _BUILTIN.get(prefix)
    if builtin is None or builtin.sdk is None or prefix in _registered:
        return None
    if installed(builtin.sdk):
        return None
    return ConfigError(
        f"{prefix}: models need the {builtin.sdk.split('.')[0]!r} package, which is not installed; "
        f"pip install 'delta-eval[{builtin.extra}]'"
    )


def check_available(model: str) -> None:
    """Raise :class:`~delta_eval.exceptions.ConfigError` now, before any run starts, when ``model``'s prefix is
    unknown or its provider SDK is not installed (the message gives the ``pip install`` to type)."""
    prefix, name = split_model_id(model)
    if not prefix or not name:
        raise ConfigError(
            f"model {model!r} needs a provider prefix, as in 'openai:gpt-4.1-mini'; known prefixes: "
            + ", ".join(known_prefixes())
        )
    if prefix not in known_prefixes():
        raise ConfigError(
            f"unknown model prefix {prefix!r} in {model!r}; known prefixes: {', '.join(known_prefixes())}"
        )
    missing = _missing_sdk(prefix)
    if missing is not None:
        raise missing


def _factory(prefix: str) -> AdapterFactory | None:
    if prefix in _registered:
        return _registered[prefix]
    if prefix in _BUILTIN:
        missing = _missing_sdk(prefix)
        if missing is not None:
            raise missing
        module_name, _, attr = _BUILTIN[prefix].factory.partition(":")
        factory: AdapterFactory = getattr(importlib.import_module(module_name), attr)
        return factory
    plugin = _plugins().get(prefix)
    if plugin is None:
        return None
    loaded: AdapterFactory = plugin.load()
    return loaded


def adapter_modules(model: str) -> list[str]:
    """The modules a process imports to serve ``model``, found without importing any: its adapter's module, and
    for a built-in adapter the HTTP transport its SDK client runs on where that is installed. A worker of a
    sharded run imports them before its shard arrives. An unknown prefix has none.

    Example:
        >>> adapter_modules("simulated:base")
        ['delta_eval.adapters.simulated']
    """
    prefix = split_model_id(model)[0]
    if prefix in _registered:
        factory = _registered[prefix]
        # a partial names functools: its function's module is the adapter's
        module = getattr(getattr(factory, "func", factory), "__module__", None)
        return [module] if module and module != "__main__" else []
    builtin = _BUILTIN.get(prefix)
    if builtin is not None:
        transport = [builtin.transport] if builtin.transport is not None and installed(builtin.transport) else []
        return [builtin.factory.partition(":")[0], *transport]
    plugin = _plugins().get(prefix)
    return [plugin.module] if plugin is not None else []


def create_adapter(
    model: str, options: Mapping[str, Any] | None = None, context: AdapterContext | None = None
) -> ModelAdapter:
    """The adapter for ``model`` (``"prefix:name"``), built with provider ``options``."""
    check_available(model)
    factory = _factory(split_model_id(model)[0])
    assert factory is not None  # check_available knows the prefix
    context = context or AdapterContext()
    adapter = factory(model, dict(options or {}), context)
    adapter.use_catalogue(context.models)
    return adapter
