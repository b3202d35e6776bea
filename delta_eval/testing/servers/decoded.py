"""Canonical objects a fake server decoded from parts of earlier requests, kept by those parts' JSON.

The requests of one conversation repeat its whole history, and a client sends the same tool definitions with every
call. Building a fresh :class:`~delta_eval.schema.Message` or :class:`~delta_eval.schema.ToolSpec` for each part of
each request cost a fake server much of its CPU time, and the fresh objects defeated the memos keyed by identity
downstream (the simulated model's cache key, the recordings' prefix hashes, the prompt cache's block keys), which
then hashed the whole history again. A part equal to one decoded lately gets the very object built then.

A part is found by its JSON (msgspec's encoding, in the order its keys came) and then compared with ``==`` to the
part kept: the two together tell apart what either alone would not (``1`` from ``1.0`` or ``true``, a NaN from
``null``), so a kept object is handed out only for a part its builder would have built it from. Validation that
depends on where a part sits in the request (its index in error messages, tool calls left open) stays with the
caller, for every part of every request.

:class:`RequestFrames` then keeps the tool definitions' tuple itself the same from one request to the next (a
validated request holds a copy of the tuple it was given).

Example:
    >>> memo = DecodedParts[str](maxsize=2)
    >>> memo.get({"role": "user"}, lambda: "built"), memo.get({"role": "user"}, lambda: "never called")
    ('built', 'built')
    >>> memo.get({"n": 1}, lambda: "int"), memo.get({"n": 1.0}, lambda: "float")
    ('int', 'float')
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import msgspec

from delta_eval.calls import GenerateParams, ModelRequest
from delta_eval.schema import Message, ToolSpec

__all__ = ["DecodedParts", "RequestFrames"]

V = TypeVar("V")

_encode = msgspec.json.Encoder().encode


class DecodedParts(Generic[V]):
    """``get(part, build)``: ``build()`` the first time, the object built then for an equal part later (the
    ``maxsize`` most recently used are kept). ``build`` must depend on ``part`` alone."""

    def __init__(self, maxsize: int = 4096) -> None:
        self.maxsize = maxsize
        self._items: OrderedDict[bytes, tuple[Any, V]] = OrderedDict()

    def get(self, part: Any, build: Callable[[], V]) -> V:
        """The object built from ``part`` (parsed JSON), built once while an equal part is kept."""
        try:
            key = _encode(part)
        except (TypeError, msgspec.EncodeError):  # not JSON (a caller's own object): nothing to key it by
            return build()
        hit = self._items.get(key)
        if hit is not None and hit[0] == part:
            # Moved to the end: kept longest. Not move_to_end, which fails if another thread dropped it meanwhile.
            self._items[key] = self._items.pop(key, hit)
            return hit[1]
        value = build()
        self._items[key] = (part, value)
        if len(self._items) > self.maxsize:
            self._items.popitem(last=False)
        return value


class RequestFrames:
    """Canonical requests on a kept frame: a request validated without messages for each model, tuple of tools and
    parameters (the same objects, from :class:`DecodedParts`), and a copy of it with each request's messages.

    The copy is what validating the whole request would give (the messages are :class:`~delta_eval.schema.Message`
    objects already), but its ``tools`` is the frame's own tuple, one object for every request of a conversation:
    what memos keyed by identity (the request's cache key, the tools' length in the prompt) need to hit.
    """

    def __init__(self, maxsize: int = 256) -> None:
        self.maxsize = maxsize
        self._items: OrderedDict[tuple[str, int, int], tuple[Any, Any, ModelRequest]] = OrderedDict()

    def request(
        self, model: str, messages: tuple[Message, ...], tools: tuple[ToolSpec, ...], params: GenerateParams
    ) -> ModelRequest:
        """The request of ``model`` with these messages, tools and parameters."""
        key = (model, id(tools), id(params))  # the entry holds both objects: their ids name them while it lives
        hit = self._items.get(key)
        if hit is not None and hit[0] is tools and hit[1] is params:
            self._items.move_to_end(key)
            frame = hit[2]
        else:
            frame = ModelRequest(model=model, messages=(), tools=tools, params=params)
            self._items[key] = (tools, params, frame)
            if len(self._items) > self.maxsize:
                self._items.popitem(last=False)
        if not all(type(m) is Message for m in messages):  # not only messages built by a decoder: validated whole
            return ModelRequest(model=model, messages=messages, tools=tools, params=params)
        return frame.model_copy(update={"messages": messages})
