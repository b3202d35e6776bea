"""Read LangSmith runs as model calls.

A run of ``run_type`` ``llm`` is one model call. Its ``inputs`` are what the traced function was called with:
for the SDK wrappers (``wrap_openai``, ``wrap_anthropic``) the request itself (``messages`` in OpenAI's or
Anthropic's spelling, ``tools``, ``system``), for LangChain chat models ``messages`` as LangChain serialises them
(``{"lc": 1, "type": "constructor", "id": [..., "HumanMessage"], "kwargs": {...}}``, often one list per batch
item) with the tools in ``extra.invocation_params.tools``. Its ``outputs`` are what the call returned: an OpenAI
completion (``choices``), an Anthropic message (LangSmith's wrapper writes its tool calls as OpenAI
``tool_calls``), or LangChain's ``generations``. Runs of other types (chains, tools, retrievers) are passed over.

Calls are grouped by the thread LangSmith groups them by (``extra.metadata`` ``thread_id``, ``session_id`` or
``conversation_id``), else by ``trace_id``, and ordered by ``start_time`` (then ``dotted_order``). A run's own
``session_id`` is its tracing project, not a conversation, and is not used to group.

Runs are read as the API returns them (``Client.list_runs``, ``GET /runs/{id}``, one JSON object per run: a run's
``inputs``, ``outputs`` and ``extra`` may be objects or JSON text, as in a Parquet export), and as the SDK posts
them (``/runs/multipart``: a run's fields, ``inputs``, ``outputs`` and ``extra`` put back together).

Example:
    >>> run = {"id": "r1", "run_type": "llm", "trace_id": "t1", "start_time": "2026-01-01T00:00:00Z",
    ...        "inputs": {"messages": [{"role": "user", "content": "hi"}]},
    ...        "outputs": {"choices": [{"message": {"role": "assistant", "content": "hello"}}]},
    ...        "extra": {"metadata": {"thread_id": "th-1"}}}
    >>> [c] = FORMAT.calls([("line 1", run)], "runs.jsonl")
    >>> c.conversation, c.label, [m.content for m in c.call.input + c.call.output]
    ('th-1', 'line 1, run r1', ['hi', 'hello'])
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from delta_eval.exceptions import RecordError
from delta_eval.ingest.model_calls import RecordedCall
from delta_eval.ingest.native_base import Err, placeholder
from delta_eval.ingest.trace_fields import answer_messages, as_json, chat_messages, instant, is_list, tool_specs
from delta_eval.ingest.traces import TracedCall, TraceFormat
from delta_eval.schema import Message, ToolSpec

__all__ = ["FORMAT", "THREAD_KEYS", "looks_like", "model_calls", "runs_of_multipart"]

#: The metadata keys LangSmith groups a thread's traces by, in the order they are looked for.
THREAD_KEYS = ("thread_id", "session_id", "conversation_id")
#: LangChain's message classes (and ``messages_to_dict`` types) by the chat role they play.
_LANGCHAIN_ROLES = {
    "HumanMessage": "user", "HumanMessageChunk": "user", "human": "user",
    "AIMessage": "assistant", "AIMessageChunk": "assistant", "ai": "assistant",
    "SystemMessage": "system", "SystemMessageChunk": "system", "system": "system",
    "ToolMessage": "tool", "ToolMessageChunk": "tool", "tool": "tool",
    "FunctionMessage": "tool", "function": "tool",
}  # fmt: skip


def looks_like(record: Any) -> bool:
    """Whether ``record`` is a LangSmith run: a ``run_type`` beside its ``trace_id`` (or its ``inputs``)."""
    return isinstance(record, Mapping) and "run_type" in record and ("trace_id" in record or "inputs" in record)


def _langchain_text(content: Any) -> Any:
    """LangChain content (text, or a list of blocks) as chat content: text blocks kept, media as placeholders,
    tool-use blocks left out (LangChain lists them again in ``tool_calls``)."""
    if not is_list(content):
        return content
    texts = []
    for block in content:
        if isinstance(block, str):
            texts.append(block)
        elif isinstance(block, Mapping) and block.get("type") == "text":
            texts.append(str(block.get("text") or ""))
        elif isinstance(block, Mapping) and block.get("type") in ("image", "image_url", "file", "audio"):
            texts.append(placeholder(str(block["type"]), block.get("mime_type")))
    return "".join(texts) if texts else None


def _langchain_message(raw: Mapping[str, Any]) -> dict[str, Any] | None:
    """A LangChain message (serialised with ``dumpd``, or as ``messages_to_dict`` writes it) as an OpenAI chat
    message; ``None`` when ``raw`` is not one."""
    if raw.get("lc") == 1 and is_list(raw.get("id")) and raw["id"] and isinstance(raw.get("kwargs"), Mapping):
        kind, data = str(raw["id"][-1]), raw["kwargs"]
    elif isinstance(raw.get("type"), str) and isinstance(raw.get("data"), Mapping):
        kind, data = raw["type"], raw["data"]
    elif isinstance(raw.get("type"), str) and "role" not in raw and raw["type"] in _LANGCHAIN_ROLES:
        kind, data = raw["type"], raw
    else:
        return None
    role = _LANGCHAIN_ROLES.get(kind) or data.get("role")
    out: dict[str, Any] = {"role": role, "content": _langchain_text(data.get("content"))}
    listed = data.get("tool_calls")
    calls = [
        {"id": c.get("id"), "function": {"name": c.get("name"), "arguments": c.get("args", {})}}
        for c in (listed if is_list(listed) else ())
        if isinstance(c, Mapping)
    ]
    if not calls:
        extra = data.get("additional_kwargs")
        openai_calls = extra.get("tool_calls") if isinstance(extra, Mapping) else None
        calls = list(openai_calls) if is_list(openai_calls) else []
    if calls:
        out["tool_calls"] = calls
        if out["content"] == "":
            out["content"] = None
    if role == "tool":
        out["tool_call_id"] = data.get("tool_call_id") or data.get("name")
        out["content"] = out["content"] if out["content"] is not None else ""
    if isinstance(data.get("name"), str):
        out["name"] = data["name"]
    return out


def _messages(raw: Any) -> Any:
    """The messages a run's ``inputs`` hold, LangChain's spelled as OpenAI chat (a batch's first item)."""
    if is_list(raw) and raw and all(is_list(m) for m in raw):
        raw = raw[0]  # LangChain logs a chat model's input as a batch of message lists
    if not is_list(raw):
        return raw
    out = []
    for m in raw:
        converted = _langchain_message(m) if isinstance(m, Mapping) else None
        out.append(converted if converted is not None else m)
    return out


def _input(inputs: Mapping[str, Any], err: Err) -> tuple[Message, ...]:
    if "messages" in inputs:
        return chat_messages(_messages(as_json(inputs["messages"])), err, "inputs.messages",
                             system=inputs.get("system"))  # fmt: skip
    prompts = inputs.get("prompts", inputs.get("prompt", inputs.get("input")))
    if is_list(prompts) and len(prompts) == 1:
        prompts = prompts[0]
    if isinstance(prompts, str) and prompts:
        return (Message(role="user", content=prompts),)
    raise err("inputs", f"the run records no messages or prompt it sent (found {sorted(inputs)})")


def _output(outputs: Any, err: Err) -> tuple[Message, ...]:
    if not isinstance(outputs, Mapping):
        return answer_messages(outputs, err, "outputs")
    generations = outputs.get("generations")
    if is_list(generations):
        first = generations[0] if generations else None
        first = first[0] if is_list(first) and first else first
        if not isinstance(first, Mapping):
            return ()
        message = first.get("message")
        if isinstance(message, Mapping):
            converted = _langchain_message(message)
            return answer_messages(converted if converted is not None else message, err, "outputs.generations[0]")
        return answer_messages(first.get("text"), err, "outputs.generations[0].text")
    if "choices" in outputs or "content" in outputs or "tool_calls" in outputs:
        converted = _langchain_message(outputs)
        return answer_messages(converted if converted is not None else outputs, err, "outputs")
    for key in ("output", "message"):
        if key in outputs:
            value = outputs[key]
            converted = _langchain_message(value) if isinstance(value, Mapping) else None
            return answer_messages(converted if converted is not None else value, err, f"outputs.{key}")
    return ()


def _tools(inputs: Mapping[str, Any], extra: Mapping[str, Any], err: Err) -> tuple[ToolSpec, ...] | None:
    params = as_json(extra.get("invocation_params"))
    for field, holder in (("inputs", inputs), ("extra.invocation_params", params)):
        if isinstance(holder, Mapping) and holder.get("tools") is not None:
            return tool_specs(as_json(holder["tools"]), err, f"{field}.tools")
    return None


def _traced(record: Any, label: str, source: str, position: int) -> TracedCall | None:
    if not isinstance(record, Mapping):
        raise RecordError(source, label, "", f"a run must be an object, not {type(record).__name__}")
    if "run_type" not in record:
        raise RecordError(source, label, "run_type", f"not a LangSmith run: it has no run_type (found "
                          f"{sorted(map(str, record))[:8]})")  # fmt: skip
    if record.get("run_type") != "llm":
        return None  # chains, tools, retrievers, prompts: not a model call
    run = {k: as_json(v) for k, v in record.items()}
    where = f"{label}, run {run['id']}" if run.get("id") is not None else label
    err = Err(source, where, "")
    inputs, extra = run.get("inputs"), run.get("extra") or {}
    if not isinstance(inputs, Mapping):
        raise err("inputs", f"the run's inputs must be an object, not {type(inputs).__name__}")
    if not isinstance(extra, Mapping):
        raise err("extra", f"must be an object, not {type(extra).__name__}")
    call = RecordedCall(input=_input(inputs, err), output=_output(run.get("outputs"), err),
                        tools=_tools(inputs, extra, err))  # fmt: skip
    metadata = as_json(extra.get("metadata"))
    thread = next((metadata[k] for k in THREAD_KEYS if isinstance(metadata, Mapping) and metadata.get(k)), None)
    key = thread if thread is not None else run.get("trace_id") or where
    start = instant(run.get("start_time"))
    order = (start if start is not None else float("inf"), str(run.get("dotted_order") or ""), position)
    return TracedCall(conversation=str(key), order=order, label=where, call=call, fields=run)


def model_calls(records: Iterable[tuple[str, Any]], source: str) -> Iterator[TracedCall | RecordError]:
    """The model calls of LangSmith runs ``(label, run)``: one per ``llm`` run, a :class:`RecordError` for a run
    that cannot be read (naming the line, the run id and the field)."""
    for position, (label, record) in enumerate(records):
        if isinstance(record, RecordError):
            yield record
            continue
        try:
            traced = _traced(record, label, source, position)
        except RecordError as exc:
            yield exc
            continue
        if traced is not None:
            yield traced


def runs_of_multipart(parts: Iterable[tuple[str, bytes]]) -> list[dict[str, Any]]:
    """The runs a LangSmith SDK posted to ``/runs/multipart``, as the API would return them: each part is named
    ``post.{id}`` or ``patch.{id}`` (the run's fields) or ``post.{id}.inputs``/``outputs``/``extra``/``events``
    (one of its fields), its body JSON; a patch completes its post (the run's end, outputs and error).

    Example:
        >>> runs_of_multipart([("post.r1", b'{"id": "r1", "run_type": "llm"}'), ("post.r1.inputs", b'{"a": 1}'),
        ...                    ("patch.r1.outputs", b'{"b": 2}')])
        [{'id': 'r1', 'run_type': 'llm', 'inputs': {'a': 1}, 'outputs': {'b': 2}}]
    """
    runs: dict[str, dict[str, Any]] = {}
    for name, body in parts:
        _, run_id, *field = name.split(".", 2)
        run = runs.setdefault(run_id, {})
        value = json.loads(body)
        if field:
            run[field[0]] = value
        else:
            run.update(value)
    return list(runs.values())


#: LangSmith runs as a trace format (``message_format="langsmith"``).
FORMAT = TraceFormat(calls=model_calls, looks_like=looks_like)
