"""Recorded model calls assembled into one conversation: what every trace reader (OpenTelemetry GenAI,
OpenInference, Langfuse, LangSmith) does once it has the calls of a conversation in order.

A trace records each model call with its input as sent and its output. An agent usually sends the whole history
each time, so the conversation is the last call's input and output; but an agent that switches skill sends
another system prompt and other tools from then on, and may filter or rewrite its history after a hand-off. So the
messages are grown call by call (each call adds what it sent that is new, then its answer), and each call's own
system prompt, tools and, where it differs, history are kept as a :class:`~delta_eval.schema.CallContext`: the
replay point of that call gets exactly what production sent.

Example:
    >>> from delta_eval.schema import Message
    >>> user, hello = Message(role="user", content="hi"), Message(role="assistant", content="hello")
    >>> calls = [RecordedCall(system="Be brief.", input=(user,), output=(hello,)),
    ...          RecordedCall(system="Be brief.", input=(user, hello, Message(role="user", content="bye")),
    ...                       output=(Message(role="assistant", content="bye!"),))]
    >>> messages, contexts = assemble(calls)
    >>> [m.content for m in messages], [c.message_index for c in contexts]
    (['Be brief.', 'hi', 'hello', 'bye', 'bye!'], [2, 4])
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, TypeAdapter

from delta_eval.schema import CallContext, Message, ReasoningState, Role, ToolCall, ToolSpec

__all__ = ["DraftMessage", "DraftToolCall", "RecordedCall", "assemble", "draft", "message_of", "unchecked_model"]

#: A tool call as a reader drafts it: ``(id, name, arguments)``, the fields of :class:`~delta_eval.schema.ToolCall`.
DraftToolCall = tuple[str, str, str]
#: A message as a reader drafts it, before it is a :class:`~delta_eval.schema.Message`: ``(role, content,
#: tool_calls, tool_call_id, name, reasoning)``, fields the reader has already checked. A reader of many calls
#: (OpenTelemetry GenAI) keeps its messages so until a conversation is assembled: plain tuples are built, compared
#: and pickled (:mod:`delta_eval.ingest.traces` spills calls to a file past a bound) by the interpreter's own C code,
#: five to ten times faster than pydantic models, and each message becomes a model once, however many calls sent it.
DraftMessage = tuple[Role, str | None, tuple[DraftToolCall, ...], str | None, str | None, ReasoningState | None]

Model = TypeVar("Model", bound=BaseModel)


def draft(
    role: Role,
    content: str | None = None,
    tool_calls: tuple[DraftToolCall, ...] = (),
    tool_call_id: str | None = None,
    name: str | None = None,
    reasoning: ReasoningState | None = None,
) -> DraftMessage:
    """A :data:`DraftMessage`, its fields named as :class:`~delta_eval.schema.Message` names them."""
    return (role, content, tool_calls, tool_call_id, name, reasoning)


_set = object.__setattr__
_MESSAGE_FIELDS = frozenset(("role", "content", "tool_calls", "tool_call_id", "name", "reasoning"))
_CALL_FIELDS = frozenset(("id", "name", "arguments"))


def unchecked_model(
    cls: type[Model], values: dict[str, Any], fields_set: set[str], extra: Any = None, private: Any = None
) -> Model:
    """A model of ``values`` made as pydantic's own ``__setstate__`` makes one, without validating them: for values
    known to be of the model's types already (a reader's drafts, a model's own fields read back)."""
    model = cls.__new__(cls)
    _set(model, "__dict__", values)
    _set(model, "__pydantic_fields_set__", fields_set)
    _set(model, "__pydantic_extra__", extra)
    _set(model, "__pydantic_private__", private)
    return model


def message_of(m: DraftMessage) -> Message:
    """The message a draft stands for: equal in every way to ``Message(role=..., content=..., ...)`` of its fields,
    made without validating again what the reader checked when it drafted them.

    Example:
        >>> m = message_of(draft("assistant", tool_calls=(("c1", "get_order", '{"id": 1}'),)))
        >>> m == Message(role="assistant", tool_calls=(ToolCall(id="c1", name="get_order", arguments='{"id": 1}'),),
        ...              content=None, tool_call_id=None, name=None, reasoning=None)
        True
    """
    role, content, calls, call_id, name, reasoning = m
    # The reader checked each field when it drafted it. (One message at a time; assemble validates a conversation's
    # messages all at once, which is faster still.)
    tool_calls = tuple(
        unchecked_model(ToolCall, {"id": c[0], "name": c[1], "arguments": c[2]}, set(_CALL_FIELDS)) for c in calls
    )
    values = {"role": role, "content": content, "tool_calls": tool_calls, "tool_call_id": call_id, "name": name,
              "reasoning": reasoning, "media": ()}  # fmt: skip
    return unchecked_model(Message, values, set(_MESSAGE_FIELDS))


# Slotted, not frozen: a frozen dataclass sets each field through object.__setattr__ (4x slower to make), and
# a reading makes several of these per model call. Read-only by convention.
@dataclass(slots=True)
class RecordedCall:
    """One model call as a trace records it.

    ``input`` is the messages sent (system messages among them are the system prompt), ``system`` a system prompt
    sent apart from the messages (Anthropic's ``system``, OTel's ``gen_ai.system_instructions``), ``tools`` the
    tools offered (``None`` when the trace does not record them), ``output`` the assistant message it answered with
    (empty when the call failed or its output was not recorded). Messages may be :data:`DraftMessage` tuples, made
    models by :func:`assemble`.
    """

    input: tuple[Message | DraftMessage, ...]
    output: tuple[Message | DraftMessage, ...] = ()
    system: str | None = None
    tools: tuple[ToolSpec, ...] | None = None


_CANONICAL = json.JSONEncoder(sort_keys=True)


@functools.lru_cache(maxsize=4096)
def _canonical_arguments(text: str) -> str:
    # The same call's arguments recur in every later call's history: each text is normalised once.
    try:
        return _CANONICAL.encode(json.loads(text or "{}"))
    except ValueError:
        return text


def _key(m: Message | DraftMessage) -> tuple[object, ...]:
    """What makes two records of a message the same message (tool-call ids and spacing aside); a draft and the
    model made of it have the same key."""
    if type(m) is tuple:
        role, content, calls, call_id = m[0], m[1], [(c[1], _canonical_arguments(c[2])) for c in m[2]], m[3]
    else:
        role, content, call_id = m.role, m.content, m.tool_call_id  # type: ignore[union-attr]
        calls = [(c.name, _canonical_arguments(c.arguments)) for c in m.tool_calls]  # type: ignore[union-attr]
    return (role, (content or "").strip(), tuple(calls), call_id if role == "tool" else None)


def _new_messages(sent: list[Any], history: list[Any]) -> tuple[list[Any], bool]:
    """The messages of ``sent`` this conversation does not have yet, and whether ``sent`` is the history as is
    (messages as drafts or models)."""
    # A reader that shares the messages a call re-sends makes most of them the same object, and the answer a call
    # re-sends is mostly equal to the one recorded (drafts compare as tuples, in C): no key to compute. (A draft is
    # never equal to a model: those two are compared by key.)
    if len(sent) >= len(history):
        for a, b in zip(sent, history, strict=False):  # sent is the longer
            if a is not b and a != b and _key(a) != _key(b):
                break
        else:
            return sent[len(history) :], True
    # The history was filtered or rewritten: what is new comes after the last message already had (or after the
    # agent's last answer in what was sent, when none is).
    known = {_key(m) for m in history}
    last_known = max((i for i, m in enumerate(sent) if _key(m) in known), default=-1)
    last_answer = max((i for i, m in enumerate(sent) if _role(m) == "assistant"), default=-1)
    return sent[max(last_known, last_answer) + 1 :], False


def _role(m: Message | DraftMessage) -> str:
    return m[0] if type(m) is tuple else m.role  # type: ignore[union-attr]


def _fields(m: Message | DraftMessage) -> Message | dict[str, Any]:
    """A draft as the fields of its message, those :func:`message_of` sets (to be validated with the rest of the
    conversation); a model as it is."""
    if type(m) is not tuple:
        return m  # type: ignore[return-value]  # a Message (mypy cannot narrow a tuple alias by type())
    role, content, calls, call_id, name, reasoning = m
    tool_calls = [{"id": c[0], "name": c[1], "arguments": c[2]} for c in calls] if calls else ()
    return {"role": role, "content": content, "tool_calls": tool_calls, "tool_call_id": call_id, "name": name,
            "reasoning": reasoning}  # fmt: skip


#: A conversation's messages and calls, validated at once: pydantic's own code makes every model in one call, in
#: C, faster than making them one by one in Python without validating (:func:`message_of`).
_ASSEMBLED = TypeAdapter(tuple[tuple[Message, ...], tuple[CallContext, ...]])


def assemble(calls: Sequence[RecordedCall]) -> tuple[tuple[Message, ...], tuple[CallContext, ...]]:
    """The messages of a conversation made of ``calls`` (in the order they were made) and the context of each call
    that answered: the first call's system prompt opens the messages; a call whose system prompt, tools or history
    differ from that carries them in its :class:`~delta_eval.schema.CallContext`."""
    # The messages stay as the calls hold them (drafts or models) until the end, when those kept become models: a
    # draft's role and content are read by index, and drafts compare as tuples, in C.
    history: list[Message | DraftMessage] = []
    opening: str | None = None
    contexts: list[dict[str, Any]] = []
    for n, call in enumerate(calls):
        system_parts = [call.system] if call.system else []
        sent: list[Message | DraftMessage] = []
        for m in call.input:
            if type(m) is tuple:
                role, content = m[0], m[1]
            else:
                role, content = m.role, m.content  # type: ignore[union-attr]
            if role != "system":
                sent.append(m)
            elif content:
                system_parts.append(content)
        system = "\n\n".join(system_parts) if system_parts else None
        if n == 0:
            opening = system
        new, as_is = _new_messages(sent, history)
        history.extend(new)
        answer = next((m for m in call.output if _role(m) == "assistant"), None)
        if answer is None:
            continue  # nothing to replay against; what it sent is kept for the calls after it
        index = len(history) + (1 if opening is not None else 0)
        contexts.append({"message_index": index, "system": system, "tools": call.tools,
                         "input": None if as_is else [_fields(m) for m in sent]})  # fmt: skip
        history.append(answer)
    head = [{"role": "system", "content": opening}] if opening is not None else []
    assembled: tuple[tuple[Message, ...], tuple[CallContext, ...]]
    assembled = _ASSEMBLED.validate_python((head + [_fields(m) for m in history], contexts))
    return assembled
