"""Raw Harmony text (gpt-oss models) read into reasoning, visible text and tool calls.

Some OpenAI-compatible servers return a gpt-oss model's output as it was generated, Harmony markup and all, in the
message's ``content`` instead of splitting it into ``reasoning_content`` and ``tool_calls``. A Harmony reply is a
sequence of messages, each ``<header><|message|><content><terminator>``:

- the header names the channel (``<|channel|>analysis``, ``commentary``, ``final``), optionally a recipient
  (``to=functions.get_weather``) and a content type (``<|constrain|>json``); later messages start with
  ``<|start|>assistant``;
- the terminator is ``<|end|>``, ``<|call|>`` (a tool call) or ``<|return|>`` (the final answer); a reply cut short
  has none.

Mapping: ``analysis`` is reasoning; a message to ``functions.NAME`` is a call of ``NAME`` whose arguments are the
content; ``final``, and ``commentary`` without a recipient (a preamble shown to the user), are visible text. Text
without ``<|message|>`` is not Harmony and is left alone, so the parser is safe on any reply.

This is a small reader of the documented format, not the ``openai-harmony`` package (which downloads its
tokenizer at run time).

Example:
    >>> reply = parse('<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary '
    ...               'to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}<|call|>')
    >>> reply.reasoning, reply.text, [(c.name, c.arguments) for c in reply.calls]
    ('Need weather.', None, [('get_weather', '{"city":"Paris"}')])
    >>> parse("<|channel|>final<|message|>Hello<|return|>").text
    'Hello'
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from delta_eval.schema import ToolCall

__all__ = ["HarmonyMessage", "HarmonyReply", "has_markers", "parse", "render", "split_messages"]

_TOKEN = re.compile(r"(<\|(?:start|end|message|channel|constrain|call|return)\|>)")
_TERMINATORS = {"<|end|>": "end", "<|call|>": "call", "<|return|>": "return"}
_CHANNEL = re.compile(r"<\|channel\|>\s*([^\s<]+)")
_RECIPIENT = re.compile(r"\bto=([^\s<]+)")


@dataclass(frozen=True)
class HarmonyMessage:
    """One message of a Harmony reply: its channel, recipient (``functions.NAME`` for a tool call), content and
    terminator (``end``, ``call``, ``return``, or ``""`` when the reply stopped inside it)."""

    channel: str | None
    content: str
    recipient: str | None = None
    end: str = "end"


@dataclass(frozen=True)
class HarmonyReply:
    """A Harmony reply in canonical terms: visible text, reasoning and tool calls (``None`` / empty when absent)."""

    text: str | None
    reasoning: str | None
    calls: tuple[ToolCall, ...]


def has_markers(text: str | None) -> bool:
    """Whether ``text`` is Harmony output (it holds a ``<|message|>`` marker); plain text never is.

    Example:
        >>> has_markers("<|channel|>final<|message|>Hi"), has_markers("a <b>|message|</b>"), has_markers(None)
        (True, False, False)
    """
    return bool(text) and "<|message|>" in str(text)


def split_messages(text: str) -> list[HarmonyMessage]:
    """The messages of a Harmony reply, in order. A header without a ``<|message|>`` after it (a reply cut off after
    ``<|start|>assistant``) is dropped; a special token inside a message's content is kept as its text."""
    messages: list[HarmonyMessage] = []
    header: list[str] = []
    body: list[str] | None = None  # None: reading a header
    for piece in _TOKEN.split(text):
        if not piece:
            continue
        if body is None:
            if piece == "<|message|>":
                body = []
            else:
                header.append(piece)
            continue
        if piece in _TERMINATORS or piece == "<|start|>":
            messages.append(_message("".join(header), "".join(body), _TERMINATORS.get(piece, "")))
            header, body = ([piece] if piece == "<|start|>" else []), None
        else:
            body.append(piece)
    if body is not None:  # cut short inside a message
        messages.append(_message("".join(header), "".join(body), ""))
    return messages


def _message(header: str, content: str, end: str) -> HarmonyMessage:
    channel = _CHANNEL.search(header)
    recipient = _RECIPIENT.search(header)
    return HarmonyMessage(
        channel=channel.group(1) if channel else None,
        content=content,
        recipient=recipient.group(1) if recipient else None,
        end=end,
    )


def render(messages: Sequence[HarmonyMessage]) -> str:
    """Harmony text for ``messages``, as a model writes it after the prompt's ``<|start|>assistant`` (the inverse of
    :func:`split_messages`; a fake server uses it to answer as gpt-oss behind a raw-text server).

    Example:
        >>> render([HarmonyMessage("analysis", "Think."), HarmonyMessage("final", "Hi", end="return")])
        '<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>Hi<|return|>'
    """
    out: list[str] = []
    for k, m in enumerate(messages):
        head = "" if k == 0 else "<|start|>assistant"
        if m.channel is not None:
            head += f"<|channel|>{m.channel}"
        if m.recipient is not None:
            head += f" to={m.recipient} <|constrain|>json"
        end = f"<|{m.end}|>" if m.end else ""
        out.append(f"{head}<|message|>{m.content}{end}")
    return "".join(out)


def parse(text: str) -> HarmonyReply:
    """``text`` read as a Harmony reply (see the module's docstring); text without markers is returned as the
    visible text, unchanged."""
    if not has_markers(text):
        return HarmonyReply(text=text, reasoning=None, calls=())
    texts: list[str] = []
    thoughts: list[str] = []
    calls: list[ToolCall] = []
    for m in split_messages(text):
        if m.recipient is not None:
            name = m.recipient.removeprefix("functions.")
            # Ids are made up, stable within the reply: Harmony calls carry none.
            calls.append(ToolCall(id=f"harmony_{len(calls)}_{name}", name=name, arguments=m.content.strip() or "{}"))
        elif m.channel == "analysis":
            thoughts.append(m.content)
        else:  # final, a commentary preamble, or no channel at all
            texts.append(m.content)
    return HarmonyReply(
        text="\n".join(texts) if texts else None,
        reasoning="\n".join(thoughts) if thoughts else None,
        calls=tuple(calls),
    )
