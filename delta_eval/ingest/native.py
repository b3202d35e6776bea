"""Records in a provider's native message format, read into canonical conversations: the format told from a
record's shape (``message_format="auto"``), and the reader of each format chosen by name.

The readers themselves are one module each, in the format's own vocabulary: :mod:`.anthropic_messages`,
:mod:`.gemini_contents` and :mod:`.openai_responses`.

Example:
    >>> from delta_eval.mapping import FieldMapping
    >>> record = {"id": "a1", "system": "Be brief.", "messages": [{"role": "user", "content": "hi"},
    ...           {"role": "assistant", "content": [{"type": "text", "text": "hello"}]}]}
    >>> detect_format(record, FieldMapping())
    'anthropic'
    >>> conv = native_conversation(FieldMapping(), "anthropic", record, source="x.jsonl", label="line 1")
    >>> [m.role for m in conv.messages]
    ['system', 'user', 'assistant']
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from delta_eval.chat_format import parse_tools
from delta_eval.exceptions import RecordError
from delta_eval.ingest.anthropic_messages import read_anthropic
from delta_eval.ingest.gemini_contents import get_field, read_gemini
from delta_eval.ingest.openai_responses import read_responses
from delta_eval.mapping import FieldMapping, maybe_json
from delta_eval.paths import MISSING, get_path
from delta_eval.schema import Conversation, Message, ToolSpec

__all__ = ["NATIVE_READERS", "detect_format", "native_conversation"]

Reader = Callable[..., tuple[Message, ...]]

#: The reader of each native format, by its ``message_format`` name.
NATIVE_READERS: dict[str, Reader] = {
    "anthropic": read_anthropic,
    "gemini": read_gemini,
    "openai-responses": read_responses,
}
_LISTS = ("messages", "contents", "input", "output", "tools")
# Blocks only Anthropic's messages hold: a chat message list with one of them is Anthropic's.
_ANTHROPIC_BLOCKS = {"tool_use", "tool_result", "thinking", "redacted_thinking", "image", "document"}


def _body(record: Mapping[str, Any], mapping: FieldMapping) -> tuple[Mapping[str, Any], str]:
    """The request body of a record, and the field path it sits at: the object at ``messages`` when that is one,
    else the record itself."""
    found = maybe_json(get_path(record, mapping.messages))
    body, prefix = (found, f"{mapping.messages}.") if isinstance(found, Mapping) else (record, "")
    # Parquet and SQL sources often keep the lists as JSON text; a system prompt stays text even if it looks like JSON.
    if any(isinstance(body.get(k), str) for k in _LISTS):
        body = {k: maybe_json(v) if k in _LISTS else v for k, v in body.items()}
    return body, prefix


def detect_format(record: Any, mapping: FieldMapping) -> str:
    """The message format of a record, from its shape; ``ValueError`` saying what was looked for and found.

    Example:
        >>> detect_format({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}, FieldMapping())
        'gemini'
    """
    if not isinstance(record, Mapping):
        raise ValueError(f"message_format='auto' needs the first record to be an object; it is a "
                         f"{type(record).__name__}")  # fmt: skip
    found = maybe_json(get_path(record, mapping.messages))
    if isinstance(found, list):
        # Plain-text chat reads the same either way; only Anthropic's blocks or its top-level system tell.
        contents = [m["content"] for m in found if isinstance(m, Mapping) and isinstance(m.get("content"), list)]
        blocks = [b for content in contents for b in content]
        roles = {m["role"] for m in found if isinstance(m, Mapping) and isinstance(m.get("role"), str)}
        native = any(
            isinstance(b, Mapping) and isinstance(b.get("type"), str) and b["type"] in _ANTHROPIC_BLOCKS for b in blocks
        )  # (a type of a list or an object names no block: not hashed)
        if (native or "system" in record) and not roles & {"system", "tool", "developer", "function"}:
            return "anthropic"
        return "openai"
    body, _ = _body(record, mapping)
    if isinstance(body.get("contents"), list):
        return "gemini"
    if isinstance(body.get("input"), list | str) or isinstance(body.get("output"), list) or "instructions" in body:
        return "openai-responses"
    raise ValueError(
        f"message_format='auto' found no known message format in the first record: it looked for a message list at "
        f"{mapping.messages!r} (OpenAI chat or Anthropic Messages), 'contents' (Gemini) and 'input', 'output' or "
        f"'instructions' (OpenAI Responses), and found the fields {sorted(map(str, body))[:20]}; "
        "set message_format= to say which"
    )


def _built_in(tool: Mapping[str, Any], fmt: str) -> bool:
    """Whether a tool is one the provider runs itself (web search, code execution): nothing a replay can call."""
    if fmt == "gemini":
        return True  # every Gemini function is under functionDeclarations; the other keys are built-in tools
    if fmt == "anthropic" and tool.get("type") not in (None, "custom"):
        return True
    return not ("name" in tool or "function" in tool)


def _native_tools(raw: Any, fmt: str) -> Any:
    """Native tool declarations in the shape :func:`~delta_eval.chat_format.parse_tools` reads."""
    if not isinstance(raw, Sequence) or isinstance(raw, str | bytes):
        return raw  # parse_tools says what is wrong with it
    out: list[Any] = []
    for t in raw:
        declarations = get_field(t, "functionDeclarations") if isinstance(t, Mapping) and fmt == "gemini" else None
        if not isinstance(t, Mapping):
            out.append(t)
        elif isinstance(declarations, list):
            for d in declarations:
                params = get_field(d, "parametersJsonSchema") or d.get("parameters") if isinstance(d, Mapping) else None
                out.append({**d, "parameters": params} if isinstance(d, Mapping) else d)
        elif fmt == "anthropic" and "input_schema" in t:
            out.append({k: v for k, v in t.items() if k != "input_schema"} | {"parameters": t["input_schema"]})
        elif not _built_in(t, fmt):
            out.append(t)
    return out


def native_conversation(
    mapping: FieldMapping, fmt: str, record: Any, *, source: str, label: str = "", position: int = 0, root: Any = None
) -> Conversation:
    """One record of native format ``fmt`` as a validated :class:`Conversation`, or a :class:`RecordError` raised
    naming the field. Id, metadata and tools follow ``mapping`` as for OpenAI chat; the model a record names
    (``model``) is kept on the reasoning state read, so a replay on that model sends it back."""
    if not isinstance(record, Mapping):
        raise RecordError(source, label, "", f"a record must be an object, not {type(record).__name__}")
    conv_id = mapping.conversation_id(record, source=source, label=label, position=position)
    label = f"{label} (id {conv_id})" if label else f"id {conv_id}"
    body, prefix = _body(record, mapping)
    model = body.get("model", record.get("model"))
    messages = NATIVE_READERS[fmt](body, source=source, record=label, prefix=prefix,
                                   model=model if isinstance(model, str) else "")  # fmt: skip
    tools: tuple[ToolSpec, ...] = mapping.tools
    if mapping.tools_field:
        raw_tools = get_path(record, mapping.tools_field)
        if raw_tools is MISSING and prefix:
            raw_tools = body.get("tools", MISSING)
        if raw_tools is not MISSING and raw_tools is not None:
            tools = parse_tools(_native_tools(maybe_json(raw_tools), fmt), source=source, record=label,
                                field=mapping.tools_field)  # fmt: skip
    return Conversation(id=conv_id, messages=messages, tools=tools, metadata=mapping.metadata_of(record, root),
                        source=source, record=label)  # fmt: skip
