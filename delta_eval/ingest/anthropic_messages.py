"""Read Anthropic Messages requests (top-level ``system`` + ``messages`` of content blocks) as canonical messages.

Blocks: ``text``; ``image`` and ``document`` with a ``base64``, ``url`` or ``text`` source (a
:class:`~delta_eval.schema.MediaPart` of the user message or tool result; a ``file`` source, which names an uploaded
file without its bytes, and media in an assistant turn stay a placeholder naming the media type); ``tool_use``
(an assistant :class:`~delta_eval.schema.ToolCall`, its ``input`` as JSON text);
``tool_result`` (a tool message; ``is_error`` marks the content with ``[tool error]``); ``thinking`` and
``redacted_thinking`` (the assistant turn's blocks kept verbatim in a :class:`~delta_eval.schema.ReasoningState`
of provider ``anthropic``, as :func:`delta_eval.adapters.anthropic.encode_messages` sends them back).

Example:
    >>> msgs = read_anthropic({"system": "Be brief.", "messages": [
    ...     {"role": "user", "content": "hi"},
    ...     {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}}]},
    ...     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]},
    ...     {"role": "assistant", "content": "done"}]})
    >>> [m.role for m in msgs], msgs[2].tool_calls[0].arguments
    (['system', 'user', 'assistant', 'tool', 'assistant'], '{"a": 1}')
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from delta_eval.ingest.native_base import TOOL_ERROR, Err, OpenCalls, arguments_json, media, placeholder
from delta_eval.schema import MediaKind, MediaPart, Message, ReasoningState, ToolCall

__all__ = ["PROVIDER", "read_anthropic"]

#: The provider named on the reasoning state read (the adapter's, so a replay on the same model sends it back).
PROVIDER = "anthropic"
_THINKING = ("thinking", "redacted_thinking")


def _blocks(content: Any, err: Err, field: str) -> list[Mapping[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, Sequence) or isinstance(content, bytes):
        raise err(field, f"content must be a string or a list of blocks, not {type(content).__name__}")
    for j, block in enumerate(content):
        if not isinstance(block, Mapping) or not isinstance(block.get("type"), str):
            raise err(f"{field}[{j}]", "a content block must be an object with a type")
    return list(content)


def _placeholder(block: Mapping[str, Any]) -> str:
    source = block.get("source")
    media_type = source.get("media_type") if isinstance(source, Mapping) else None
    return placeholder(str(block["type"]), media_type)


def _media(block: Mapping[str, Any], err: Err, field: str) -> MediaPart | str:
    """The media part of an ``image`` or ``document`` block, or its placeholder when the record holds no bytes."""
    source = block.get("source")
    if not isinstance(source, Mapping):
        raise err(f"{field}.source", f"an {block['type']} block needs its source")
    kind: MediaKind = "image" if block["type"] == "image" else "file"
    where, media_type = f"{field}.source", source.get("media_type")
    if source.get("type") == "base64":
        return media(kind, err, f"{where}.data", data=source.get("data"), media_type=media_type)
    if source.get("type") == "url":
        return media(kind, err, f"{where}.url", url=source.get("url"), media_type=media_type)
    if source.get("type") == "text" and isinstance(source.get("data"), str):
        # A plain-text document: its text is the file's bytes.
        mt = media_type if isinstance(media_type, str) and media_type else "text/plain"
        return MediaPart.from_bytes("file", source["data"].encode("utf-8"), mt)
    return _placeholder(block)


def _system(raw: Any, err: Err) -> str | None:
    if raw is None or isinstance(raw, str):
        return raw
    blocks = _blocks(raw, err, "system")
    texts = []
    for j, b in enumerate(blocks):
        if b["type"] != "text" or not isinstance(b.get("text"), str):
            raise err(f"system[{j}]", f"a system block must be text, not {b['type']!r}")
        texts.append(b["text"])
    return "\n\n".join(texts)


def _result(raw: Any, err: Err, field: str) -> tuple[str, tuple[MediaPart, ...]]:
    if raw is None:
        return "", ()
    texts: list[str] = []
    found: list[MediaPart] = []
    for j, b in enumerate(_blocks(raw, err, field)):
        if b["type"] == "text":
            texts.append(str(b.get("text", "")))
        elif b["type"] in ("image", "document"):
            part = _media(b, err, f"{field}[{j}]")
            if isinstance(part, MediaPart):
                found.append(part)
            else:
                texts.append(part)
        else:
            raise err(f"{field}[{j}]", f"unsupported block {b['type']!r} in a tool result")
    return "".join(texts), tuple(found)


def read_anthropic(body: Mapping[str, Any], *, source: str = "", record: str = "", prefix: str = "",
                   model: str = "") -> tuple[Message, ...]:  # fmt: skip
    """The canonical messages of one Anthropic Messages request body; ``model`` is named on reasoning state.

    Raises :class:`~delta_eval.exceptions.RecordError` naming the field (``messages[3].content[1].tool_use_id``).
    """
    err = Err(source, record, prefix)
    out: list[Message] = []
    system = _system(body.get("system"), err)
    if system is not None:
        out.append(Message(role="system", content=system))
    raw = body.get("messages")
    if not isinstance(raw, Sequence) or isinstance(raw, str | bytes) or not raw:
        raise err("messages", "expected a non-empty list of messages")
    calls = OpenCalls(err)
    for i, m in enumerate(raw):
        if not isinstance(m, Mapping):
            raise err(f"messages[{i}]", f"a message must be an object, not {type(m).__name__}")
        role = m.get("role")
        if role not in ("user", "assistant"):
            raise err(f"messages[{i}].role", f"unknown role {role!r}; expected user or assistant")
        field = f"messages[{i}].content"
        blocks = _blocks(m.get("content"), err, field)
        if role == "assistant":
            out.append(_assistant(blocks, err, field, calls, model))
            continue
        texts: list[str] = []
        found: list[MediaPart] = []
        for j, b in enumerate(blocks):
            kind = b["type"]
            if kind == "tool_result":
                if texts or found:  # results come first in a turn; text before one is its own user message
                    calls.close()
                    out.append(Message(role="user", content="".join(texts), media=tuple(found)))
                    texts, found = [], []
                call_id = b.get("tool_use_id")
                if not isinstance(call_id, str) or not call_id:
                    raise err(f"{field}[{j}].tool_use_id", "a tool result needs the tool_use_id it answers")
                call = calls.answer(call_id, None, f"{field}[{j}].tool_use_id")
                text, result_media = _result(b.get("content"), err, f"{field}[{j}].content")
                if b.get("is_error") is True:
                    text = TOOL_ERROR + text
                out.append(Message(role="tool", content=text, tool_call_id=call.id, name=call.name,
                                   media=result_media))  # fmt: skip
            elif kind == "text":
                if not isinstance(b.get("text"), str):
                    raise err(f"{field}[{j}].text", "a text block needs its text")
                texts.append(b["text"])
            elif kind in ("image", "document"):
                part = _media(b, err, f"{field}[{j}]")
                if isinstance(part, MediaPart):
                    found.append(part)
                else:
                    texts.append(part)
            else:
                raise err(f"{field}[{j}].type", f"unsupported block {kind!r} in a user message")
        if texts or found or not any(b["type"] == "tool_result" for b in blocks):
            calls.close()
            out.append(Message(role="user", content="".join(texts), media=tuple(found)))
    calls.close()
    return tuple(out)


def _assistant(blocks: list[Mapping[str, Any]], err: Err, field: str, calls: OpenCalls, model: str) -> Message:
    calls.close()
    texts: list[str] = []
    tool_calls: list[ToolCall] = []
    thoughts: list[str] = []
    for j, b in enumerate(blocks):
        kind = b["type"]
        if kind == "text":
            if not isinstance(b.get("text"), str):
                raise err(f"{field}[{j}].text", "a text block needs its text")
            texts.append(b["text"])
        elif kind == "tool_use":
            for key in ("id", "name"):
                if not isinstance(b.get(key), str) or not b[key]:
                    raise err(f"{field}[{j}].{key}", f"a tool_use block needs its {key}")
            args = arguments_json(b.get("input"), err, f"{field}[{j}].input")
            call = ToolCall(id=b["id"], name=b["name"], arguments=args)
            calls.open(call, f"{field}[{j}]")
            tool_calls.append(call)
        elif kind in _THINKING:
            if kind == "thinking" and isinstance(b.get("thinking"), str):
                thoughts.append(b["thinking"])
        elif kind in ("image", "document"):
            texts.append(_placeholder(b))  # no provider takes media back in an assistant turn
        else:
            raise err(f"{field}[{j}].type", f"unsupported block {kind!r} in an assistant message")
    if not texts and not tool_calls:
        raise err(field, "an assistant message needs text or tool calls")
    state = None
    if any(b["type"] in _THINKING for b in blocks):
        # Kept verbatim, the whole turn in its order: signed thinking goes back unmodified (as the adapter keeps it).
        state = ReasoningState(
            provider=PROVIDER,
            model=model,
            data={"content": [dict(b) for b in blocks]},
            summary="\n".join(t for t in thoughts if t) or None,
        )
    return Message(role="assistant", content="".join(texts) if texts else None, tool_calls=tuple(tool_calls),
                   reasoning=state)  # fmt: skip
