"""A small memo of values computed from immutable objects, kept by the objects' identity.

Hashing a frozen model hashes all its fields, which is what the memo is there to avoid; keying by ``id`` is safe
because each entry holds its object, so the identity cannot be reused while the entry lives. The oldest entries go
once ``maxsize`` is reached.

Example:
    >>> memo = IdentityMemo[str](maxsize=2)
    >>> key = ("a", "b")
    >>> memo.get(key, lambda k: "-".join(k)), memo.get(key, lambda k: "never called")
    ('a-b', 'a-b')
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Generic, TypeVar

__all__ = ["IdentityMemo"]

V = TypeVar("V")


class IdentityMemo(Generic[V]):
    """``get(obj, compute)``: ``compute(obj)`` the first time, the kept value while ``obj`` stays in the memo."""

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self._items: OrderedDict[int, tuple[Any, V]] = OrderedDict()

    def get(self, obj: Any, compute: Callable[[Any], V]) -> V:
        """The value for ``obj``, computed once while it is kept."""
        hit = self._items.get(id(obj))
        if hit is not None and hit[0] is obj:
            return hit[1]
        value = compute(obj)
        self._items[id(obj)] = (obj, value)
        if len(self._items) > self.maxsize:
            self._items.popitem(last=False)
        return value
