"""The OpenAI-chat spelling of the canonical types: parse messages and tool specs, validating as they go.

It is the format of most production exports (read by ``ingest/``), of tool files, and of what a user's render
function may return (read by ``replay/``), so it sits beside the schema rather than in any one stage.

Every problem raises :class:`~delta_eval.exceptions.RecordError` naming the source, the record and the field
(``messages[4].tool_call_id``), so that a person can find and fix the record.

Real exports have quirks this parser accepts on purpose: tool-call ids reused within a conversation (a result
answers the most recent open call with that id), ``content`` given as a list of text parts, arguments given as an
object instead of a JSON string (re-serialised), and ``content`` next to ``tool_calls`` (kept as narration).

Media parts of a user or tool message (``image_url`` with an ``http(s)`` or ``data:`` URL, ``input_audio`` with
base64 data and a format, ``file`` with ``file_data``) become the message's
:class:`~delta_eval.schema.MediaPart` objects; a ``file`` given only by ``file_id`` (an upload whose bytes the record
does not hold) becomes a placeholder text naming it. A message may also carry canonical ``media`` (a list of
:class:`~delta_eval.schema.MediaPart` fields, as ``Message.model_dump()`` writes them), so a render function may
return dumped messages without losing their media.
"""

from __future__ import annotations

import datetime
import decimal
import json
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from delta_eval.exceptions import ConfigError, RecordError
from delta_eval.schema import MediaPart, Message, ToolCall, ToolSpec

__all__ = ["load_tools", "parse_messages", "parse_tools"]

_ROLES = ("system", "user", "assistant", "tool")
# "developer" is OpenAI's newer name for the system role; "function" is the legacy single-tool result role.
_ROLE_ALIASES = {"developer": "system", "function": "tool"}


_MEDIA_PARTS = ("image_url", "input_audio", "file")


def _media(part: Mapping[str, Any], err: _Err, field: str) -> MediaPart | str:
    """The media of an ``image_url``, ``input_audio`` or ``file`` part (a placeholder for a bare ``file_id``)."""
    kind = part["type"]
    body = part.get(kind)
    if not isinstance(body, Mapping):
        raise err(f"{field}.{kind}", f"a {kind} part needs its {kind} object")
    url, data, fmt, name = body.get("url"), body.get("data"), body.get("format"), body.get("filename")
    name = name if isinstance(name, str) and name else None
    if kind == "image_url" and (not isinstance(url, str) or not url):
        raise err(f"{field}.image_url.url", "an image_url part needs its url")
    if kind == "input_audio" and (not isinstance(data, str) or not data or not isinstance(fmt, str) or not fmt):
        raise err(f"{field}.input_audio", "an input_audio part needs its data (base64) and format")
    file_data = body.get("file_data")
    if kind == "file" and not (isinstance(file_data, str) and file_data):
        if isinstance(body.get("file_id"), str):
            return f"[file: {name or body['file_id']}]"
        raise err(f"{field}.file", "a file part needs its file_data (or a file_id)")
    try:
        if kind == "image_url":
            return MediaPart.from_url("image", str(url))
        if kind == "input_audio":
            return MediaPart.from_base64("audio", str(data), f"audio/{fmt}")
        if str(file_data).startswith("data:"):
            return MediaPart.from_url("file", str(file_data), filename=name)
        return MediaPart.from_base64("file", str(file_data), filename=name)
    except ValueError as exc:
        raise err(f"{field}.{kind}", f"unreadable {kind}: {exc}") from None


def _canonical_media(raw: Any, err: _Err, field: str) -> tuple[MediaPart, ...]:
    if not raw:
        return ()
    if not isinstance(raw, Sequence) or isinstance(raw, str | bytes):
        raise err(field, "media must be a list of media parts")
    try:
        return tuple(p if isinstance(p, MediaPart) else MediaPart.model_validate(p) for p in raw)
    except ValueError as exc:
        raise err(field, f"not a media part: {exc}") from None


def _content(value: Any, err: _Err, field: str, *, media_ok: bool = False) -> tuple[str | None, tuple[MediaPart, ...]]:
    if value is None or isinstance(value, str):
        return value, ()
    if isinstance(value, Sequence):
        parts: list[str] = []
        found: list[MediaPart] = []
        for k, part in enumerate(value):
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, Mapping) and part.get("type") in ("text", "input_text", "output_text"):
                parts.append(str(part.get("text", "")))
            elif media_ok and isinstance(part, Mapping) and part.get("type") in _MEDIA_PARTS:
                got = _media(part, err, f"{field}[{k}]")
                if isinstance(got, MediaPart):
                    found.append(got)
                else:
                    parts.append(got)
            else:
                kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
                where = "" if media_ok else " here (media only in user and tool messages)"
                raise err(f"{field}[{k}]", f"unsupported content part of type {kind!r}{where}")
        return "".join(parts), tuple(found)
    raise err(field, f"content must be a string, a list of content parts or null, not {type(value).__name__}")


class _Err:
    def __init__(self, source: str, record: str, prefix: str) -> None:
        self.source, self.record, self.prefix = source, record, prefix

    def __call__(self, field: str, reason: str) -> RecordError:
        return RecordError(self.source, self.record, f"{self.prefix}{field}", reason)


def _tool_call(raw: Any, err: _Err, field: str) -> ToolCall:
    if not isinstance(raw, Mapping):
        raise err(field, f"a tool call must be an object, not {type(raw).__name__}")
    fn = raw.get("function", raw)  # accept both {function: {name, arguments}} and a flat {name, arguments}
    if not isinstance(fn, Mapping):
        raise err(f"{field}.function", "must be an object with name and arguments")
    name = fn.get("name")
    if not isinstance(name, str) or not name:
        raise err(f"{field}.function.name", "missing tool name")
    call_id = raw.get("id")
    if not isinstance(call_id, str) or not call_id:
        raise err(f"{field}.id", "missing tool call id")
    args = fn.get("arguments", "{}")
    if args is None:
        args = "{}"
    elif not isinstance(args, str):
        try:
            # Given as an object; a SQL source may hand over dates and decimals for what were JSON strings.
            args = json.dumps(args, ensure_ascii=False, default=_as_json)
        except (TypeError, ValueError, RecursionError) as exc:
            raise err(f"{field}.function.arguments", f"arguments cannot be written as JSON: {exc}") from None
    # Counting brackets first keeps the exact scan for the rare arguments that could be too deep.
    if args.count("[") + args.count("{") > MAX_JSON_DEPTH and (depth := json_depth(args)) > MAX_JSON_DEPTH:
        raise err(f"{field}.function.arguments", f"arguments nest {depth} levels deep (at most {MAX_JSON_DEPTH})")
    return ToolCall(id=call_id, name=name, arguments=args)


def _as_json(value: Any) -> Any:
    """JSON for the values a database gives where the export had JSON strings (dates, times, decimals, UUIDs)."""
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal | uuid.UUID):
        return str(value) if isinstance(value, uuid.UUID) else float(value)
    raise TypeError(f"a value of type {type(value).__name__} is not JSON")


#: How deep tool-call arguments may nest: real ones stay far below; Python's parser fails near 1,000 levels and
#: every later reader of the arguments would fail with it.
MAX_JSON_DEPTH = 100


def json_depth(text: str) -> int:
    """How deep the brackets of a JSON text nest (brackets inside strings do not count).

    Example:
        >>> json_depth('{"a": [1, {"b": "[[["}]}')
        3
    """
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def parse_messages(
    raw: Any, *, source: str = "", record: str = "", field: str = "messages", answer: bool = False
) -> tuple[Message, ...]:
    """Parse a list of OpenAI-chat messages, checking roles and that every tool call has exactly one result.

    With ``answer``, the messages are a model's answer (a trace's output): the tool calls of the last assistant
    message have no result yet (they come in the next call's input).

    Example:
        >>> msgs = parse_messages([
        ...     {"role": "user", "content": "hi"},
        ...     {"role": "assistant", "content": None, "tool_calls": [
        ...         {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        ...     {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        ...     {"role": "assistant", "content": "done"}])
        >>> [m.role for m in msgs]
        ['user', 'assistant', 'tool', 'assistant']
    """
    err = _Err(source, record, field)
    if not isinstance(raw, Sequence) or isinstance(raw, str | bytes):
        raise RecordError(source, record, field, f"expected a list of messages, got {type(raw).__name__}")
    if not raw:
        raise RecordError(source, record, field, "the conversation has no messages")
    out: list[Message] = []
    # Open calls: id -> (message index, call index, name). Ids may repeat across rounds; the latest open one wins.
    pending: dict[str, tuple[int, int, str]] = {}

    def close_pending() -> None:
        if pending:
            i, j, _ = next(iter(pending.values()))
            raise err(f"[{i}].tool_calls[{j}]", "this tool call has no result: no tool message answers it")

    for i, m in enumerate(raw):
        if not isinstance(m, Mapping):
            raise err(f"[{i}]", f"a message must be an object, not {type(m).__name__}")
        role = m.get("role")
        role = _ROLE_ALIASES.get(role, role) if isinstance(role, str) else role
        if role not in _ROLES:
            raise err(f"[{i}].role", f"unknown role {m.get('role')!r}; expected one of {', '.join(_ROLES)}")
        content, media = _content(m.get("content"), err, f"[{i}].content", media_ok=role in ("user", "tool"))
        media += _canonical_media(m.get("media"), err, f"[{i}].media")
        if role == "tool":
            call_id = m.get("tool_call_id")
            if not isinstance(call_id, str) and m.get("role") == "function":
                call_id = m.get("name")  # legacy function messages answer by name
            if not isinstance(call_id, str) or call_id not in pending:
                raise err(f"[{i}].tool_call_id", f"tool result {call_id!r} answers no open tool call")
            _, _, call_name = pending.pop(call_id)
            name = m.get("name") if isinstance(m.get("name"), str) else call_name
            out.append(Message(role="tool", content=content or "", tool_call_id=call_id, name=name, media=media))
            continue
        close_pending()
        if role == "assistant":
            raw_calls = m.get("tool_calls") or ()
            if not isinstance(raw_calls, Sequence) or isinstance(raw_calls, str):
                raise err(f"[{i}].tool_calls", "must be a list")
            calls = tuple(_tool_call(c, err, f"[{i}].tool_calls[{j}]") for j, c in enumerate(raw_calls))
            if not calls and content is None:
                raise err(f"[{i}].content", "an assistant message needs content or tool calls")
            for j, c in enumerate(calls):
                pending[c.id] = (i, j, c.name)
            out.append(Message(role="assistant", content=content, tool_calls=calls))
        else:
            if content is None:
                raise err(f"[{i}].content", f"a {role} message needs content")
            out.append(Message(role=role, content=content, media=media))
    if not answer:
        close_pending()
    return tuple(out)


def parse_tools(raw: Any, *, source: str = "", record: str = "", field: str = "tools") -> tuple[ToolSpec, ...]:
    """Parse tool specs given in OpenAI function format (``{"type": "function", "function": {...}}``) or bare.

    Example:
        >>> parse_tools([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])[0].name
        'f'
    """
    if raw is None:
        return ()
    if not isinstance(raw, Sequence) or isinstance(raw, str | bytes):
        raise RecordError(source, record, field, f"expected a list of tool specs, got {type(raw).__name__}")
    specs: list[ToolSpec] = []
    for k, t in enumerate(raw):
        if isinstance(t, ToolSpec):
            specs.append(t)
            continue
        fn = t.get("function", t) if isinstance(t, Mapping) else None
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
            raise RecordError(source, record, f"{field}[{k}]", "a tool spec needs a function name")
        params = fn.get("parameters") or {"type": "object", "properties": {}}
        if isinstance(params, str):
            try:
                params = json.loads(params)
            except ValueError as exc:
                raise RecordError(source, record, f"{field}[{k}].parameters", f"not valid JSON: {exc}") from None
        if not isinstance(params, Mapping):
            raise RecordError(source, record, f"{field}[{k}].parameters", "must be a JSON Schema object")
        specs.append(ToolSpec(name=fn["name"], description=fn.get("description") or "", parameters=dict(params)))
    return tuple(specs)


def load_tools(tools: str | Path | Sequence[Any] | None) -> tuple[ToolSpec, ...]:
    """Tool specs from a JSON file path or a list of specs (OpenAI function format or :class:`ToolSpec`).

    A missing or malformed file is a :class:`~delta_eval.exceptions.ConfigError` naming it.
    """
    if tools is None:
        return ()
    if isinstance(tools, str | Path):
        path = Path(tools)
        if not path.exists():
            raise ConfigError(f"tools file not found: {path}")
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise ConfigError(f"tools file {path} is not valid JSON: {exc}") from None
        try:
            return parse_tools(raw, source=str(path), field="")
        except RecordError as exc:
            raise ConfigError(str(exc)) from None
    return parse_tools(list(tools), source="tools")
