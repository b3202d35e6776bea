"""Resolve a user's function given as a callable or as ``"package.module:function"`` (the form config files use)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from delta_eval.exceptions import ConfigError

__all__ = ["callable_name", "resolve_callable"]


def resolve_callable(spec: str | Callable[..., Any], what: str) -> Callable[..., Any]:
    """The callable itself, or the one ``"package.module:function"`` names; ``what`` names it in errors.

    Example:
        >>> resolve_callable("json:dumps", "encoder")([1])
        '[1]'
    """
    if callable(spec):
        return spec
    module_name, sep, attr = str(spec).partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"{what} {spec!r} must be a callable or 'package.module:function'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"{what} {spec!r}: cannot import {module_name!r} ({exc})") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ConfigError(f"{what} {spec!r}: {module_name} has no callable {attr!r}")
    return fn  # type: ignore[no-any-return]


def callable_name(fn: Callable[..., Any]) -> str:
    """``module:qualname`` of a function, for manifests and reports."""
    return f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', repr(fn))}"
