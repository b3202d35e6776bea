"""Read OpenAI Responses requests (``instructions`` + ``input`` items, and a logged response's ``output``) as
canonical messages.

Items: ``message`` (role and content, a string or ``input_text`` / ``output_text`` / ``refusal`` parts;
``input_image``, ``input_file`` and ``input_audio`` parts become :class:`~delta_eval.schema.MediaPart` objects of the
message, or a placeholder naming them when given only by ``file_id`` or in an assistant turn); ``function_call``
(``call_id``, ``name``, ``arguments``); ``function_call_output``; ``reasoning`` (kept verbatim in the assistant
message's :class:`~delta_eval.schema.ReasoningState` of provider ``openai-responses``). Consecutive reasoning, assistant
message and function-call items are one assistant turn, as the adapter writes them.

Example:
    >>> msgs = read_responses({"instructions": "Be brief.", "input": [
    ...     {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
    ...     {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
    ...     {"type": "function_call_output", "call_id": "c1", "output": "ok"}],
    ...     "output": [{"type": "message", "role": "assistant",
    ...                 "content": [{"type": "output_text", "text": "done"}]}]})
    >>> [m.role for m in msgs]
    ['system', 'user', 'assistant', 'tool', 'assistant']
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from delta_eval.ingest.native_base import Err, OpenCalls, media, placeholder
from delta_eval.schema import MediaPart, Message, ReasoningState, ToolCall

__all__ = ["PROVIDER", "read_responses"]

#: The provider named on the reasoning state read (the adapter's).
PROVIDER = "openai-responses"
_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}


def _part_media(part: Mapping[str, Any], kind: str, err: Err, field: str) -> MediaPart | None:
    """The media of an ``input_*`` part, or ``None`` when it names an uploaded file only (``file_id``)."""
    if kind == "input_image":
        if part.get("image_url") is None and part.get("file_id"):
            return None
        return media("image", err, f"{field}.image_url", url=part.get("image_url"))
    if kind == "input_audio":
        audio = part.get("input_audio")
        audio = audio if isinstance(audio, Mapping) else part  # {input_audio: {data, format}}, or flat
        fmt = audio.get("format")
        return media("audio", err, f"{field}.input_audio.data", data=audio.get("data"),
                     media_type=f"audio/{fmt}" if isinstance(fmt, str) and fmt else "")  # fmt: skip
    if part.get("file_data") is None and part.get("file_url") is None and part.get("file_id"):
        return None
    return media("file", err, f"{field}.file_data", data=part.get("file_data"), url=part.get("file_url"),
                 filename=part.get("filename"))  # fmt: skip


def _content(content: Any, err: Err, field: str, *, media_ok: bool = True) -> tuple[str, tuple[MediaPart, ...]]:
    if isinstance(content, str):
        return content, ()
    if not isinstance(content, Sequence) or isinstance(content, bytes):
        raise err(field, f"content must be a string or a list of parts, not {type(content).__name__}")
    texts: list[str] = []
    found: list[MediaPart] = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind in ("input_text", "output_text", "text") and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind == "refusal":
            texts.append(str(part.get("refusal", "")))
        elif kind in ("input_image", "input_file", "input_audio"):
            got = _part_media(part, kind, err, f"{field}[{j}]") if media_ok else None
            if got is not None:
                found.append(got)
            else:
                texts.append(placeholder(kind.removeprefix("input_"), part.get("filename") or part.get("format")))
        else:
            raise err(f"{field}[{j}]", f"unsupported content part of type {kind!r}")
    return "".join(texts), tuple(found)


def _text(content: Any, err: Err, field: str) -> str:
    # An assistant turn's content: media there stay placeholders (no provider takes them back in that place).
    return _content(content, err, field, media_ok=False)[0]


class _Turn:
    """An assistant turn being gathered from consecutive items."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.calls: list[ToolCall] = []
        self.reasoning: list[dict[str, Any]] = []

    def message(self, model: str) -> Message:
        state = None
        if self.reasoning:
            parts = [s for r in self.reasoning for s in r.get("summary") or ()]
            summaries = [str(s["text"]) for s in parts if isinstance(s, Mapping) and "text" in s]
            state = ReasoningState(provider=PROVIDER, model=model, data={"items": self.reasoning},
                                   summary="\n".join(summaries) or None)  # fmt: skip
        return Message(role="assistant", content="".join(self.texts) if self.texts else None,
                       tool_calls=tuple(self.calls), reasoning=state)  # fmt: skip


def read_responses(body: Mapping[str, Any], *, source: str = "", record: str = "", prefix: str = "",
                   model: str = "") -> tuple[Message, ...]:  # fmt: skip
    """The canonical messages of one Responses request body (with its response's ``output`` when logged).

    Raises :class:`~delta_eval.exceptions.RecordError` naming the field (``input[3].call_id``).
    """
    err = Err(source, record, prefix)
    out: list[Message] = []
    instructions = body.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise err("instructions", f"instructions must be a string, not {type(instructions).__name__}")
        out.append(Message(role="system", content=instructions))
    items: list[tuple[str, Any]] = []
    for key in ("input", "output"):
        raw = body.get(key)
        if isinstance(raw, str):
            raw = [{"role": "user", "content": raw}]
        elif raw is None:
            continue
        elif not isinstance(raw, Sequence) or isinstance(raw, bytes):
            raise err(key, f"expected a list of items, not {type(raw).__name__}")
        items += [(f"{key}[{i}]", item) for i, item in enumerate(raw)]
    if not items:
        raise err("input", "expected a non-empty list of items")
    calls = OpenCalls(err)
    turn: _Turn | None = None

    def flush() -> None:
        nonlocal turn
        if turn is not None:
            if not turn.texts and not turn.calls:
                raise err(field, "an assistant turn needs text or function calls (it has only reasoning)")
            out.append(turn.message(model))
            turn = None

    for field, item in items:
        if not isinstance(item, Mapping):
            raise err(field, f"an item must be an object, not {type(item).__name__}")
        kind = item.get("type", "message")
        if kind == "function_call_output":
            flush()
            call_id = item.get("call_id")
            if not isinstance(call_id, str) or not call_id:
                raise err(f"{field}.call_id", "a function_call_output needs the call_id it answers")
            call = calls.answer(call_id, None, f"{field}.call_id")
            text, found = _content(item.get("output", ""), err, f"{field}.output")
            out.append(Message(role="tool", content=text, tool_call_id=call.id, name=call.name, media=found))
            continue
        if kind not in ("message", "function_call", "reasoning"):
            raise err(f"{field}.type", f"unsupported item type {kind!r}")
        role = _ROLES.get(str(item.get("role"))) if kind == "message" else "assistant"
        if role is None:
            raise err(f"{field}.role", f"unknown role {item.get('role')!r}; expected user, assistant or system")
        if role != "assistant":
            flush()
            calls.close()
            text, found = _content(item.get("content"), err, f"{field}.content", media_ok=role == "user")
            out.append(Message(role=role, content=text, media=found))
            continue
        # One turn: reasoning, then text, then calls; anything coming back to an earlier kind starts the next turn.
        if turn is not None and kind != "function_call" and (turn.calls or turn.texts):
            flush()
        if turn is None:
            calls.close()
            turn = _Turn()
        if kind == "reasoning":
            turn.reasoning.append(dict(item))
        elif kind == "message":
            turn.texts.append(_text(item.get("content"), err, f"{field}.content"))
        else:
            for key in ("call_id", "name"):
                if not isinstance(item.get(key), str) or not item[key]:
                    raise err(f"{field}.{key}", f"a function_call needs its {key}")
            args = item.get("arguments")
            if args is not None and not isinstance(args, str):
                raise err(f"{field}.arguments", "arguments must be JSON text")
            call = ToolCall(id=item["call_id"], name=item["name"], arguments=args or "{}")
            calls.open(call, field)
            turn.calls.append(call)
    flush()
    calls.close()
    return tuple(out)
