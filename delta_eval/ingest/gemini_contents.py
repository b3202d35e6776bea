"""Read Gemini ``generateContent`` requests (``systemInstruction`` + ``contents`` of parts) as canonical messages.

Roles are ``user`` and ``model``. Parts: ``text`` (``thought: true`` ones are reasoning, not the answer);
``inlineData`` / ``fileData`` (a :class:`~delta_eval.schema.MediaPart` of the user turn, its kind from the MIME
type; in a model turn, a placeholder naming the MIME type);
``functionCall`` (a :class:`~delta_eval.schema.ToolCall`; with no id, the stable ``gemini_{k}_{name}`` the
adapter gives); ``functionResponse`` (a tool message, matched by id, else by name in order); a model turn with
thoughts or ``thoughtSignature`` keeps its parts verbatim in a :class:`~delta_eval.schema.ReasoningState` of
provider ``gemini``. Both the REST camelCase and the SDK's snake_case spellings are read.

Example:
    >>> msgs = read_gemini({"contents": [
    ...     {"role": "user", "parts": [{"text": "hi"}]},
    ...     {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {}}}]},
    ...     {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {"output": "ok"}}}]}]})
    >>> msgs[1].tool_calls[0].id, msgs[2].tool_call_id, msgs[2].content
    ('gemini_0_f', 'gemini_0_f', 'ok')
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from delta_eval.ingest.native_base import TOOL_ERROR, Err, OpenCalls, arguments_json, kind_of, media, placeholder
from delta_eval.schema import MediaPart, Message, ReasoningState, ToolCall

__all__ = ["PROVIDER", "get_field", "read_gemini"]

#: The provider named on the reasoning state read (the adapter's).
PROVIDER = "gemini"


def get_field(part: Mapping[str, Any], camel: str) -> Any:
    """A field by its REST name (``functionCall``) or the SDK's (``function_call``).

    Example:
        >>> get_field({"function_call": {"name": "f"}}, "functionCall")
        {'name': 'f'}
    """
    if camel in part:
        return part[camel]
    return part.get("".join(f"_{c.lower()}" if c.isupper() else c for c in camel))


def _parts(content: Any, err: Err, field: str) -> list[Mapping[str, Any]]:
    if not isinstance(content, Mapping):
        raise err(field, f"a content must be an object with role and parts, not {type(content).__name__}")
    parts = content.get("parts")
    if not isinstance(parts, Sequence) or isinstance(parts, str | bytes):
        raise err(f"{field}.parts", "expected a list of parts")
    for j, p in enumerate(parts):
        if not isinstance(p, Mapping):
            raise err(f"{field}.parts[{j}]", f"a part must be an object, not {type(p).__name__}")
    return list(parts)


def _placeholder(part: Mapping[str, Any]) -> str | None:
    for key in ("inlineData", "fileData"):
        data = get_field(part, key)
        if isinstance(data, Mapping):
            return placeholder("inline data" if key == "inlineData" else "file", get_field(data, "mimeType"))
    return None


def _media(part: Mapping[str, Any], err: Err, field: str) -> MediaPart | None:
    inline = get_field(part, "inlineData")
    if isinstance(inline, Mapping):
        mime = get_field(inline, "mimeType")
        return media(kind_of(mime), err, f"{field}.inlineData.data", data=inline.get("data"), media_type=mime)
    file = get_field(part, "fileData")
    if isinstance(file, Mapping):
        mime = get_field(file, "mimeType")
        return media(kind_of(mime), err, f"{field}.fileData.fileUri", url=get_field(file, "fileUri"), media_type=mime)
    return None


def _response_text(response: Any) -> str:
    # The adapter sends {"output": text}; other writers send any object, kept as its JSON.
    if isinstance(response, Mapping) and set(response) == {"output"} and isinstance(response["output"], str):
        return response["output"]
    if isinstance(response, Mapping) and set(response) == {"error"}:
        err = response["error"]
        return TOOL_ERROR + (err if isinstance(err, str) else json.dumps(err, ensure_ascii=False))
    return json.dumps(response, ensure_ascii=False, default=str)


def read_gemini(body: Mapping[str, Any], *, source: str = "", record: str = "", prefix: str = "",
                model: str = "") -> tuple[Message, ...]:  # fmt: skip
    """The canonical messages of one Gemini request body; ``model`` is named on reasoning state.

    Raises :class:`~delta_eval.exceptions.RecordError` naming the field (``contents[2].parts[0].functionCall.name``).
    """
    err = Err(source, record, prefix)
    out: list[Message] = []
    system = get_field(body, "systemInstruction")
    if isinstance(system, str):
        out.append(Message(role="system", content=system))
    elif system is not None:
        lines = [p.get("text") for p in _parts(system, err, "systemInstruction")]
        if not all(isinstance(t, str) for t in lines):
            raise err("systemInstruction.parts", "a system instruction holds text parts only")
        out.append(Message(role="system", content="\n\n".join(str(t) for t in lines)))
    raw = body.get("contents")
    if not isinstance(raw, Sequence) or isinstance(raw, str | bytes) or not raw:
        raise err("contents", "expected a non-empty list of contents")
    calls = OpenCalls(err)
    for i, content in enumerate(raw):
        field = f"contents[{i}]"
        parts = _parts(content, err, field)
        role = content.get("role", "user")
        if role == "model":
            out.append(_model_turn(parts, err, field, calls, model))
        elif role in ("user", "function"):
            texts: list[str] = []
            found: list[MediaPart] = []
            for j, p in enumerate(parts):
                response = get_field(p, "functionResponse")
                if isinstance(response, Mapping):
                    where = f"{field}.parts[{j}].functionResponse"
                    call_id, name = response.get("id"), response.get("name")
                    if not (isinstance(call_id, str) and call_id) and not isinstance(name, str):
                        raise err(f"{where}.name", "a function response needs the name (or id) of its call")
                    call = calls.answer(call_id if isinstance(call_id, str) else None, name, where)
                    text = _response_text(response.get("response"))
                    out.append(Message(role="tool", content=text, tool_call_id=call.id, name=call.name))
                elif isinstance(p.get("text"), str):
                    texts.append(p["text"])
                elif (part := _media(p, err, f"{field}.parts[{j}]")) is not None:
                    found.append(part)
                else:
                    raise err(f"{field}.parts[{j}]", f"unsupported part with fields {sorted(p)} in a user turn")
            if texts or found or not parts:
                calls.close()
                out.append(Message(role="user", content="".join(texts), media=tuple(found)))
        else:
            raise err(f"{field}.role", f"unknown role {role!r}; expected user or model")
    calls.close()
    return tuple(out)


def _model_turn(parts: list[Mapping[str, Any]], err: Err, field: str, calls: OpenCalls, model: str) -> Message:
    calls.close()
    texts: list[str] = []
    thoughts: list[str] = []
    tool_calls: list[ToolCall] = []
    for j, p in enumerate(parts):
        call = get_field(p, "functionCall")
        if isinstance(call, Mapping):
            where = f"{field}.parts[{j}].functionCall"
            name = call.get("name")
            if not isinstance(name, str) or not name:
                raise err(f"{where}.name", "a function call needs its name")
            # No id from Gemini: the stable one the adapter makes, so results and replays agree on it.
            call_id = call.get("id") or f"gemini_{len(tool_calls)}_{name}"
            tc = ToolCall(id=str(call_id), name=name, arguments=arguments_json(call.get("args"), err, f"{where}.args"))
            calls.open(tc, where)
            tool_calls.append(tc)
        elif isinstance(p.get("text"), str):
            (thoughts if p.get("thought") else texts).append(p["text"])
        elif (shown := _placeholder(p)) is not None:
            texts.append(shown)  # no provider takes media back in an assistant turn
        elif not get_field(p, "thoughtSignature"):
            raise err(f"{field}.parts[{j}]", f"unsupported part with fields {sorted(p)} in a model turn")
    if not texts and not tool_calls:
        raise err(f"{field}.parts", "a model turn needs text or function calls")
    state = None
    if thoughts or any(get_field(p, "thoughtSignature") for p in parts):
        # The parts exactly as they came, signatures included, as the adapter keeps them to resend.
        state = ReasoningState(provider=PROVIDER, model=model, data={"parts": [dict(p) for p in parts]},
                               summary="".join(thoughts) or None)  # fmt: skip
    return Message(role="assistant", content="".join(texts) if texts else None, tool_calls=tuple(tool_calls),
                   reasoning=state)  # fmt: skip
