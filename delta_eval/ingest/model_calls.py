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

from delta_eval.schema import CallContext, Message, ToolSpec

__all__ = ["RecordedCall", "assemble"]


@dataclass(frozen=True)
class RecordedCall:
    """One model call as a trace records it.

    ``input`` is the messages sent (system messages among them are the system prompt), ``system`` a system prompt
    sent apart from the messages (Anthropic's ``system``, OTel's ``gen_ai.system_instructions``), ``tools`` the
    tools offered (``None`` when the trace does not record them), ``output`` the assistant message it answered with
    (empty when the call failed or its output was not recorded).
    """

    input: tuple[Message, ...]
    output: tuple[Message, ...] = ()
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


def _system_of(call: RecordedCall) -> str | None:
    parts = [call.system] if call.system else []
    parts += [m.content for m in call.input if m.role == "system" and m.content]
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


def assemble(calls: Sequence[RecordedCall]) -> tuple[tuple[Message, ...], tuple[CallContext, ...]]:
    """The messages of a conversation made of ``calls`` (in the order they were made) and the context of each call
    that answered: the first call's system prompt opens the messages; a call whose system prompt, tools or history
    differ from that carries them in its :class:`~delta_eval.schema.CallContext`."""
    history: list[Message] = []
    opening: str | None = None
    contexts: list[CallContext] = []
    for n, call in enumerate(calls):
        system = _system_of(call)
        if n == 0:
            opening = system
        sent = [m for m in call.input if m.role != "system"]
        new, as_is = _new_messages(sent, history)
        history.extend(new)
        answer = [m for m in call.output if m.role == "assistant"][:1]
        if not answer:
            continue  # nothing to replay against; what it sent is kept for the calls after it
        index = len(history) + (1 if opening is not None else 0)
        contexts.append(
            CallContext(message_index=index, system=system, tools=call.tools, input=None if as_is else tuple(sent))
        )
        history.extend(answer)
    head = (Message(role="system", content=opening),) if opening is not None else ()
    return (*head, *history), tuple(contexts)
