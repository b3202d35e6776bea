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

from pydantic import BaseModel

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
    # The reader checked each field when it drafted it: validating them again took half the time of assembling.
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


def _key(m: Message) -> tuple[object, ...]:
    """What makes two records of a message the same message (tool-call ids and spacing aside)."""
    calls = [(c.name, _canonical_arguments(c.arguments)) for c in m.tool_calls]
    return (m.role, (m.content or "").strip(), tuple(calls), m.tool_call_id if m.role == "tool" else None)


def _system_of(inputs: list[Message], system: str | None) -> str | None:
    parts = [system] if system else []
    parts += [m.content for m in inputs if m.role == "system" and m.content]
    return "\n\n".join(parts) if parts else None


def _new_messages(sent: list[Message], history: list[Message]) -> tuple[list[Message], bool]:
    """The messages of ``sent`` this conversation does not have yet, and whether ``sent`` is the history as is."""
    # A reader that shares the messages a call re-sends makes most of them the same object, and the answer a call
    # re-sends is mostly equal to the one recorded: no key to compute.
    if len(sent) >= len(history) and all(
        a is b or a == b or _key(a) == _key(b) for a, b in zip(sent, history, strict=False)
    ):
        return sent[len(history) :], True
    # The history was filtered or rewritten: what is new comes after the last message already had (or after the
    # agent's last answer in what was sent, when none is).
    known = {_key(m) for m in history}
    last_known = max((i for i, m in enumerate(sent) if _key(m) in known), default=-1)
    last_answer = max((i for i, m in enumerate(sent) if m.role == "assistant"), default=-1)
    return sent[max(last_known, last_answer) + 1 :], False


def _models(messages: tuple[Message | DraftMessage, ...], built: dict[int, Message]) -> list[Message]:
    """``messages`` as models, each draft built once: the drafts a conversation's calls share (the history each
    call re-sends) are the same objects, so ``built`` (by object id) makes them the same model, as a reader of
    models would have shared them."""
    out = []
    for m in messages:
        if type(m) is tuple:
            model = built.get(id(m))
            if model is None:
                model = built[id(m)] = message_of(m)
            out.append(model)
        else:
            out.append(m)  # type: ignore[arg-type]  # a Message (mypy cannot narrow a tuple alias by type())
    return out


def assemble(calls: Sequence[RecordedCall]) -> tuple[tuple[Message, ...], tuple[CallContext, ...]]:
    """The messages of a conversation made of ``calls`` (in the order they were made) and the context of each call
    that answered: the first call's system prompt opens the messages; a call whose system prompt, tools or history
    differ from that carries them in its :class:`~delta_eval.schema.CallContext`."""
    history: list[Message] = []
    opening: str | None = None
    contexts: list[CallContext] = []
    built: dict[int, Message] = {}  # the calls hold their drafts until the end: ids stay theirs
    for n, call in enumerate(calls):
        inputs = _models(call.input, built)
        system = _system_of(inputs, call.system)
        if n == 0:
            opening = system
        sent = [m for m in inputs if m.role != "system"]
        new, as_is = _new_messages(sent, history)
        history.extend(new)
        answer = [m for m in _models(call.output, built) if m.role == "assistant"][:1]
        if not answer:
            continue  # nothing to replay against; what it sent is kept for the calls after it
        index = len(history) + (1 if opening is not None else 0)
        contexts.append(
            CallContext(message_index=index, system=system, tools=call.tools, input=None if as_is else tuple(sent))
        )
        history.extend(answer)
    head = (Message(role="system", content=opening),) if opening is not None else ()
    return (*head, *history), tuple(contexts)
