"""What the readers of the providers' native message formats share: errors naming the field, tool-call arguments
as JSON text, media parts, and the check that every tool call gets exactly one result.

An image, file or audio part given by its bytes or a URL becomes a :class:`~delta_eval.schema.MediaPart` of the
message (:func:`media`); one the record names only by a provider's file id (whose bytes it does not hold), or media
in an assistant turn (no provider takes it back there), is kept as a placeholder text naming its kind and media
type (``[image: image/png]``): the turn still replays, the model is told something was there.

Example:
    >>> calls = OpenCalls(Err("x.jsonl", "line 1", ""))
    >>> calls.open(ToolCall(id="c1", name="f"), "messages[1].content[0]")
    >>> calls.answer("c1", None, "messages[2].content[0].tool_use_id").name
    'f'
"""

from __future__ import annotations

import json
from typing import Any

from delta_eval.chat_format import MAX_JSON_DEPTH, json_depth
from delta_eval.exceptions import RecordError
from delta_eval.schema import MediaKind, MediaPart, ToolCall

__all__ = ["TOOL_ERROR", "Err", "OpenCalls", "arguments_json", "kind_of", "media", "placeholder"]

#: How a tool result the provider flagged as an error is marked: the schema has no field for it, so it leads the
#: content, where both a judge and a replayed model read it.
TOOL_ERROR = "[tool error] "


class Err:
    """Builds the :class:`RecordError` of a field, its path under ``prefix`` (where the request body sits).

    Example:
        >>> Err("x.jsonl", "line 3", "request.")("messages[0].role", "unknown role").field
        'request.messages[0].role'
    """

    def __init__(self, source: str, record: str, prefix: str) -> None:
        self.source, self.record, self.prefix = source, record, prefix

    def __call__(self, field: str, reason: str) -> RecordError:
        return RecordError(self.source, self.record, f"{self.prefix}{field}", reason)


def kind_of(media_type: Any) -> MediaKind:
    """The kind of media a MIME type names (an image, audio, else a file).

    Example:
        >>> kind_of("image/png"), kind_of("audio/wav"), kind_of("application/pdf")
        ('image', 'audio', 'file')
    """
    text = media_type if isinstance(media_type, str) else ""
    return "image" if text.startswith("image/") else "audio" if text.startswith("audio/") else "file"


def media(kind: MediaKind, err: Err, field: str, *, data: Any = None, url: Any = None, media_type: Any = None,
          filename: Any = None) -> MediaPart:  # fmt: skip
    """The media part of base64 ``data`` or of a ``url`` (a ``data:`` URL gives its bytes); a
    :class:`~delta_eval.exceptions.RecordError` naming ``field`` when neither is usable.

    Example:
        >>> media("image", Err("s", "r", ""), "source", data="iVBORw0KGgo=", media_type="image/png").sha256[:8]
        '4c4b6a3b'
    """
    mt = media_type if isinstance(media_type, str) else ""
    name = filename if isinstance(filename, str) and filename else None
    try:
        if isinstance(data, bytes | bytearray) and data:  # an SDK's objects dumped in Python hold the bytes
            return MediaPart.from_bytes(kind, bytes(data), mt, filename=name)
        if isinstance(data, str) and data:
            if data.startswith("data:"):
                return MediaPart.from_url(kind, data, mt, filename=name)
            return MediaPart.from_base64(kind, data, mt, filename=name)
        if isinstance(url, str) and url:
            return MediaPart.from_url(kind, url, mt, filename=name)
    except ValueError as exc:
        raise err(field, f"unreadable {kind}: {exc}") from None
    raise err(field, f"a {kind} part needs its data (base64) or a URL")


def placeholder(kind: str, media_type: Any) -> str:
    """The text standing in for a media part the record does not give the bytes or address of.

    Example:
        >>> placeholder("image", "image/png")
        '[image: image/png]'
    """
    return f"[{kind}: {media_type if isinstance(media_type, str) and media_type else 'unknown type'}]"


# json.dumps(value, ensure_ascii=False) builds an encoder for each call (a third of its time on small arguments):
# this is the one it builds.
_ENCODER = json.JSONEncoder(ensure_ascii=False)


def arguments_json(value: Any, err: Err, field: str) -> str:
    """Tool-call arguments given as an object (or as JSON text) as the JSON text the schema keeps.

    Example:
        >>> arguments_json({"a": 1}, Err("s", "r", ""), "input")
        '{"a": 1}'
    """
    if value is None:
        return "{}"
    if isinstance(value, str):
        text = value
    else:
        try:
            text = _ENCODER.encode(value)
        except (TypeError, ValueError, RecursionError) as exc:
            raise err(field, f"arguments cannot be written as JSON: {exc}") from None
    if text.count("[") + text.count("{") > MAX_JSON_DEPTH and (depth := json_depth(text)) > MAX_JSON_DEPTH:
        raise err(field, f"arguments nest {depth} levels deep (at most {MAX_JSON_DEPTH})")
    return text


class OpenCalls:
    """The tool calls waiting for a result, in order, each with the field it was read from."""

    def __init__(self, err: Err) -> None:
        self.err = err
        self._open: list[tuple[ToolCall, str]] = []

    def open(self, call: ToolCall, field: str) -> None:
        """A call was made: it now waits for its result."""
        self._open.append((call, field))

    def answer(self, call_id: str | None, name: str | None, field: str) -> ToolCall:
        """The open call a result answers: by id when it has one, else the first open call of ``name`` (Gemini
        may give neither side an id)."""
        for k, (call, _) in enumerate(self._open):
            if (call.id == call_id) if call_id else (call.name == name):
                del self._open[k]
                return call
        what = f"id {call_id!r}" if call_id else f"name {name!r}"
        raise self.err(field, f"this tool result (by {what}) answers no open tool call")

    def close(self) -> None:
        """No more results may come: a call still open has none, and that is an error naming the call."""
        if self._open:
            raise self.err(self._open[0][1], "this tool call has no result: no tool result answers it")
