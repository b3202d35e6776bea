"""Whether an optional package can be imported, looked up without importing it."""

from __future__ import annotations

import functools
import importlib.util

__all__ = ["installed"]


@functools.cache
def installed(module: str) -> bool:
    """Whether ``module`` (a dotted name too) can be imported, looked up once per process.

    Example::

        >>> installed("json"), installed("no_such_package.sub")
        (True, False)
    """
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package of a dotted name is missing
        return False
