"""What the readers of tracing tools' exports (OpenInference, Langfuse, LangSmith) share: attributes flattened to
dotted keys made nested again, timestamps of any spelling made comparable, JSON text read where a store keeps an
object as text, and the messages, answers and tools of a model call as the tracing tools record them (the request
as the SDK was called: OpenAI chat or Anthropic Messages; the response as it returned).

Example:
    >>> unflatten({"llm.input_messages.0.message.role": "user", "llm.model_name": "m"})
    {'llm': {'input_messages': [{'message': {'role': 'user'}}], 'model_name': 'm'}}
    >>> instant("2026-12-03T21:54:03.904223Z") == instant(1796334843904223000)
    True
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, TypeGuard

from delta_eval.chat_format import parse_messages, parse_tools
from delta_eval.ingest.anthropic_messages import read_anthropic
from delta_eval.ingest.native_base import Err, arguments_json
from delta_eval.schema import Message, ToolSpec

__all__ = ["GAP", "answer_messages", "as_json", "chat_messages", "instant", "is_list", "tool_specs", "unflatten"]


class _Gap:
    """The item of a list whose index no key named (the attribute was dropped): a reader reports it by index."""

    def __repr__(self) -> str:
        return "GAP"


#: Stands where a flattened list skips an index (``...messages.0...`` and ``...messages.2...`` but no ``.1.``).
GAP: Any = _Gap()


def _nested(value: Any) -> Any:
    if isinstance(value, Mapping):
        return unflatten(value)
    if isinstance(value, list | tuple):
        return [_nested(v) for v in value]
    return value


def _listed(node: Any, top: bool = False) -> Any:
    """``node`` with every mapping whose keys are all indices turned into a list (a skipped index is :data:`GAP`).

    An index far past the number of items (a damaged key) leaves the mapping as it is: the list it would make is
    mostly gaps, and could exhaust memory."""
    if not isinstance(node, dict):
        return node
    out = {k: _listed(v) for k, v in node.items()}
    if not top and out and all(isinstance(k, str) and k.isdigit() for k in out):
        indexed = {int(k): v for k, v in out.items()}
        if max(indexed) < 2 * len(indexed) + 1000:
            return [indexed.get(i, GAP) for i in range(max(indexed) + 1)]
    return out


def unflatten(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """Dotted attribute keys as nested objects, index parts as lists (OpenInference's flattening undone).

    Keys may already be partly nested (Phoenix keeps lists of objects whose own keys are dotted: ``{"llm.
    input_messages": [{"message.role": "user"}]}``); both spellings give the same tree. A value ``None`` is no value
    (a Parquet column of a key other rows have). Where a key is both a value and the start of longer keys, the
    longer keys win: they hold the structure.
    """
    tree: dict[str, Any] = {}
    for key, value in attributes.items():
        if value is None:
            continue
        parts = str(key).split(".")
        node = tree
        for part in parts[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
        value = _nested(value)
        existing = node.get(parts[-1])
        if isinstance(existing, dict) and isinstance(value, dict):
            _merge(existing, value)
        elif not isinstance(existing, dict):
            node[parts[-1]] = value
    listed: dict[str, Any] = _listed(tree, top=True)
    return listed


def _merge(into: dict[str, Any], other: Mapping[str, Any]) -> None:
    for k, v in other.items():
        if isinstance(into.get(k), dict) and isinstance(v, dict):
            _merge(into[k], v)
        elif not isinstance(into.get(k), dict):
            into[k] = v


_FRACTION = re.compile(r"(\.\d{6})\d+")


def instant(value: Any) -> float | None:
    """Seconds since the epoch of a timestamp as exports spell it (ISO 8601 text with any precision, a
    ``datetime``, epoch nanoseconds, milliseconds or seconds); ``None`` for anything else."""
    if isinstance(value, datetime.datetime):
        moment = value if value.tzinfo is not None else value.replace(tzinfo=datetime.UTC)
        return moment.timestamp()
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        # Epoch seconds, milliseconds or nanoseconds, told apart by size (any of them from 1973 to 2286).
        magnitude = abs(value)
        return value / 1e9 if magnitude > 1e17 else value / 1e3 if magnitude > 1e11 else float(value)
    if isinstance(value, str) and value.strip().isdigit():
        return instant(int(value))  # OTLP JSON writes its nanoseconds as a string
    if isinstance(value, str) and value:
        text = _FRACTION.sub(r"\1", value.strip().replace(" ", "T", 1))
        try:
            return instant(datetime.datetime.fromisoformat(text))
        except ValueError:
            return None
    return None


def as_json(value: Any) -> Any:
    """``value`` parsed when it is JSON text of an object or a list (a store that keeps objects as text), else as
    it is."""
    if isinstance(value, str) and value.lstrip()[:1] in ("{", "["):
        try:
            return json.loads(value)
        except (ValueError, RecursionError):
            return value
    return value


def is_list(value: Any) -> TypeGuard[Sequence[Any]]:
    """Whether ``value`` is a list of items (not text)."""
    return isinstance(value, Sequence) and not isinstance(value, str | bytes)


def _anthropic_blocks(messages: Sequence[Any]) -> bool:
    """Whether chat messages carry Anthropic content blocks (``tool_use``, ``tool_result``, media with a
    ``source``) rather than OpenAI's."""
    for m in messages:
        content = m.get("content") if isinstance(m, Mapping) else None
        for b in content if is_list(content) else ():
            if isinstance(b, Mapping) and (b.get("type") in ("tool_use", "tool_result") or "source" in b):
                return True
    return False


def _with_arguments(message: Any) -> Any:
    """A chat message whose tool calls LangChain spelled (``{"name", "args", "id"}``) in OpenAI's spelling."""
    calls = message.get("tool_calls") if isinstance(message, Mapping) else None
    if not is_list(calls) or not any(isinstance(c, Mapping) and "args" in c for c in calls):
        return message
    spelled = [{"id": c.get("id"), "function": {"name": c.get("name"), "arguments": c.get("args")}}
               if isinstance(c, Mapping) and "args" in c else c for c in calls]  # fmt: skip
    return {**message, "tool_calls": spelled}


def chat_messages(raw: Any, err: Err, field: str, *, system: Any = None) -> tuple[Message, ...]:
    """The messages of a model call as sent: OpenAI chat messages, or Anthropic Messages ones (``system`` beside
    them, or as leading ``system`` messages, as some tracers record it)."""
    if not is_list(raw):
        raise err(field, f"expected a list of messages, got {type(raw).__name__}")
    if system is None and not _anthropic_blocks(raw):
        return parse_messages([_with_arguments(m) for m in raw], source=err.source, record=err.record, field=field)
    head = [m for m in raw if isinstance(m, Mapping) and m.get("role") == "system"]
    texts = [system] if isinstance(system, str) else []
    texts += [str(m.get("content") or "") for m in head if isinstance(m.get("content"), str)]
    body: dict[str, Any] = {"messages": [m for m in raw if not (isinstance(m, Mapping) and m.get("role") == "system")]}
    if texts:
        body["system"] = "\n\n".join(texts)
    elif system is not None:
        body["system"] = system
    prefix = field.rsplit("messages", 1)[0] if field.endswith("messages") else f"{field}."
    return read_anthropic(body, source=err.source, record=err.record, prefix=prefix)


def answer_messages(raw: Any, err: Err, field: str) -> tuple[Message, ...]:
    """A model's answer as tracers record the response: an OpenAI completion (``choices``), an OpenAI chat
    message, an Anthropic message (content blocks; tool calls as blocks or, as LangSmith's wrapper writes them,
    OpenAI ``tool_calls``), or text. Its tool calls have no results yet."""
    if isinstance(raw, str):
        return (Message(role="assistant", content=raw),) if raw else ()
    if not isinstance(raw, Mapping):
        return ()
    choices = raw.get("choices")
    if is_list(choices):
        if not choices:
            return ()
        if not isinstance(choices[0], Mapping) or not isinstance(choices[0].get("message"), Mapping):
            raise err(f"{field}.choices[0].message", "a completion choice needs its message")
        raw, field = choices[0]["message"], f"{field}.choices[0].message"
    raw = _with_arguments(raw)
    content = raw.get("content")
    message: dict[str, Any] = {"role": raw.get("role") or "assistant", "content": content}
    calls = list(raw["tool_calls"]) if is_list(raw.get("tool_calls")) else []
    if is_list(content):
        texts = [str(b.get("text") or "") for b in content if isinstance(b, Mapping) and b.get("type") == "text"]
        message["content"] = "".join(texts) if texts else None
        if not calls:
            calls = [{"id": b.get("id"), "function": {"name": b.get("name"), "arguments": arguments_json(
                b.get("input"), err, f"{field}.content[{j}].input")}}
                for j, b in enumerate(content) if isinstance(b, Mapping) and b.get("type") == "tool_use"]  # fmt: skip
    if calls:
        message["tool_calls"] = calls
    if message["content"] is None and not calls:
        return ()  # nothing answered (a failed call): the call is kept for what it sent
    return parse_messages([message], source=err.source, record=err.record, field=field, answer=True)


def tool_specs(raw: Any, err: Err, field: str) -> tuple[ToolSpec, ...]:
    """Tool specs as an SDK was given them: OpenAI's (``{"type": "function", "function": ...}``), Anthropic's
    (``input_schema``) or bare; a provider's built-in tool (web search: a ``type`` and no function) is left out,
    as there is nothing to replay."""
    if not is_list(raw):
        raise err(field, f"expected a list of tool specs, got {type(raw).__name__}")
    specs: list[Any] = []
    for t in raw:
        t = as_json(t)
        if isinstance(t, Mapping) and "input_schema" in t and "parameters" not in t:
            t = {"name": t.get("name"), "description": t.get("description"), "parameters": t["input_schema"]}
        if isinstance(t, Mapping) and t.get("type", "function") != "function":
            continue
        specs.append(t)
    return parse_tools(specs, source=err.source, record=err.record, field=field)
