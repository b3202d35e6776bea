"""Small memos: values computed from immutable objects, kept by the objects' identity (:class:`IdentityMemo`),
and folds over sequences that reuse the state of a shared prefix (:class:`PrefixFold`).

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

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

__all__ = ["IdentityMemo", "PrefixFold"]

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


S = TypeVar("S")

#: Pairs of sequences found to agree up to some length (both held, so their ids name them while kept).
_AGREED: OrderedDict[tuple[int, int], tuple[tuple[Any, ...], tuple[Any, ...], int]] = OrderedDict()
_AGREED_LOCK = threading.Lock()


class PrefixFold(Generic[S]):
    """A fold over a sequence of items that reuses the state of the longest prefix it folded lately.

    The requests of one conversation share their history: each turn's request is the previous one's messages and a
    few more. Folding each whole history again (to hash it, to count it) made a conversation's replay quadratic in
    its length; here a request's fold starts from the state kept for the longest prefix it shares with a request
    folded before, so each call costs the items it adds. States are kept at the end of each fold and every
    ``every`` items along it (the turns of one conversation may be folded in any order), the oldest going once
    ``maxsize`` are kept.

    ``step(state, item)`` returns the next state and may change ``state`` in place if ``copy`` copies it: a kept
    state is never handed out or stepped on, only copies of it. A kept prefix is reused when its items equal the new
    sequence's (``==``: the same objects, or equal values), so ``step`` must read only what equal items share;
    ``salt`` keeps apart folds that start from different states.

    Example:
        >>> count = PrefixFold[int](lambda salt: 0, lambda n, item: n + len(item))
        >>> words = ("a", "bb", "ccc")
        >>> count.fold(words[:2]), count.fold(words), count.reused
        (3, 6, 2)
    """

    def __init__(
        self,
        start: Callable[[Any], S],
        step: Callable[[S, Any], S],
        *,
        copy: Callable[[S], S] = lambda state: state,
        maxsize: int = 512,
        every: int = 32,
    ) -> None:
        self._start, self._step, self._copy = start, step, copy
        self.maxsize, self.every = maxsize, every
        #: (salt, id of the prefix's last item, its length) -> (a sequence that starts with the prefix, its state)
        self._kept: OrderedDict[tuple[Any, int, int], tuple[tuple[Any, ...], S]] = OrderedDict()
        self._lock = threading.Lock()
        #: Items taken from kept prefixes instead of folded again (for tests and benchmarks).
        self.reused = 0

    def fold(self, items: Sequence[Any], salt: Any = None) -> S:
        """The state after folding ``items`` from ``start(salt)`` (a state of the caller's own)."""
        if not isinstance(items, tuple):
            items = tuple(items)  # kept prefixes must not change under them
        n = len(items)
        k, state = self._longest(items, salt)
        state = self._copy(state) if k else self._start(salt)
        self.reused += k
        for i in range(k, n):
            state = self._step(state, items[i])
            if (i + 1) % self.every == 0 and i + 1 < n:
                self._keep(items, i + 1, salt, self._copy(state))
        if n and n != k:
            self._keep(items, n, salt, self._copy(state))
        return state

    def _longest(self, items: tuple[Any, ...], salt: Any) -> tuple[int, Any]:
        for k in range(len(items), 0, -1):
            with self._lock:
                hit = self._kept.get((salt, id(items[k - 1]), k))
                if hit is not None:
                    self._kept.move_to_end((salt, id(items[k - 1]), k))
            if hit is not None and self._agree(hit[0], items, k):
                return k, hit[1]
        return 0, None

    def _agree(self, kept: tuple[Any, ...], items: tuple[Any, ...], k: int) -> bool:
        # Equality of the two slices, in C: it compares identities first, and the items of one conversation's
        # requests are mostly the same objects. Several folds of one request (its key, its count) find the prefix in
        # the same earlier request: compared once for them all.
        if kept is items:
            return True
        with _AGREED_LOCK:
            hit = _AGREED.get((id(kept), id(items)))
        if hit is not None and hit[0] is kept and hit[1] is items and hit[2] >= k:
            return True
        if kept[:k] != items[:k]:
            return False
        with _AGREED_LOCK:
            _AGREED[(id(kept), id(items))] = (kept, items, k if hit is None else max(k, hit[2]))
            while len(_AGREED) > 64:
                _AGREED.popitem(last=False)
        return True

    def _keep(self, items: tuple[Any, ...], k: int, salt: Any, state: S) -> None:
        # The kept sequence holds the prefix's last item, so its id names it while the entry lives.
        with self._lock:
            self._kept[(salt, id(items[k - 1]), k)] = (items, state)
            self._kept.move_to_end((salt, id(items[k - 1]), k))
            while len(self._kept) > self.maxsize:
                self._kept.popitem(last=False)
