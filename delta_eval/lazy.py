"""A package's public names imported on first use (PEP 562), so that importing the package costs only what its
caller uses: ``import delta_eval`` in a worker process or a command's ``--help`` imports no stage of a run.

A package's ``__init__`` lists where each name lives and lets this module answer for the names not imported yet;
the same names are imported under ``TYPE_CHECKING`` there, so type checkers and IDEs see every one.

Example:
    >>> getattr_, dir_ = lazy_names("delta_eval", {"delta_eval.variant": ("Variant",)})
    >>> getattr_("Variant").__name__, "Variant" in dir_()
    ('Variant', True)
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(
    package: str, exports: Mapping[str, tuple[str, ...]], submodules: tuple[str, ...] = ()
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``: each name of ``exports`` (a module -> the names it
    defines) imported from its module on first use, each of ``submodules`` as ``package.name``, then kept in the
    package's namespace (the next use is a plain attribute lookup). Any other name raises the usual
    :class:`AttributeError`."""
    module_of = {name: module for module, names in exports.items() for name in names}
    namespace = vars(sys.modules[package])

    def __getattr__(name: str) -> Any:
        if name in module_of:
            value = getattr(importlib.import_module(module_of[name]), name)
        elif name in submodules:
            value = importlib.import_module(f"{package}.{name}")
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *module_of, *submodules})

    return __getattr__, __dir__
