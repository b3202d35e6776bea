"""Agents that run recorded conversations through the real ``openai`` and ``anthropic`` SDKs against the fake
provider servers, so a tracing library instrumenting those SDKs records real traces of real tool conversations.

An agent sends the history up to each recorded assistant turn (with the conversation's tools), takes the model's
answer as the SDK returns it, and carries on with the recorded tool results (answering the ids the model really
gave) and user messages: each model call of the trace is one the SDK really made.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from delta_eval.adapters.anthropic import encode_messages as anthropic_messages
from delta_eval.adapters.openai_chat import encode_messages as openai_messages
from delta_eval.adapters.openai_chat import encode_tools
from delta_eval.schema import Conversation, Message, ToolCall

MODEL = "gpt-4.1-mini"
CLAUDE = "claude-sonnet-4-5"

Call = Callable[[list[Message]], Message]


def tool_conversations(conversations: list[Conversation], n: int, rounds: int = 2) -> list[Conversation]:
    """The first ``n`` conversations with at least ``rounds`` tool-call rounds, cut after their last assistant
    message (a trace holds what was sent and answered, nothing after)."""
    out = []
    for c in conversations:
        if sum(1 for m in c.messages if m.tool_calls) < rounds:
            continue
        last = max(i for i, m in enumerate(c.messages) if m.role == "assistant")
        out.append(c.model_copy(update={"messages": c.messages[: last + 1]}))
        if len(out) == n:
            break
    return out


def run_agent(conv: Conversation, call: Call) -> list[Message]:
    """Run ``conv`` through ``call`` (one model call per recorded assistant turn); the messages as the run had
    them (the model's answers, results renamed to the ids it gave)."""
    history: list[Message] = []
    ids: dict[str, str] = {}
    for m in conv.messages:
        if m.role == "assistant":
            answer = call(history)
            ids.update((r.id, a.id) for r, a in zip(m.tool_calls, answer.tool_calls, strict=False))
            history.append(answer)
        elif m.role == "tool":
            history.append(m.model_copy(update={"tool_call_id": ids.get(m.tool_call_id or "", m.tool_call_id)}))
        else:
            history.append(m)
    return history


def openai_call(client: Any, conv: Conversation, model: str = MODEL) -> Call:
    """One chat completion with the real ``openai`` client: the history and the conversation's tools."""

    def call(history: list[Message]) -> Message:
        response = client.chat.completions.create(
            model=model, messages=openai_messages(history), tools=encode_tools(conv.tools)
        )
        message = response.choices[0].message
        calls = tuple(
            ToolCall(id=c.id, name=c.function.name, arguments=c.function.arguments) for c in message.tool_calls or ()
        )
        return Message(role="assistant", content=message.content, tool_calls=calls)

    return call


def anthropic_call(client: Any, conv: Conversation, model: str = CLAUDE) -> Call:
    """One Messages request with the real ``anthropic`` client: the history and the conversation's tools."""
    tools = [{"name": t.name, "description": t.description, "input_schema": t.parameters} for t in conv.tools]

    def call(history: list[Message]) -> Message:
        system, messages = anthropic_messages(history, model)
        extra: dict[str, Any] = {"system": system} if system is not None else {}
        response = client.messages.create(model=model, max_tokens=1024, messages=messages, tools=tools, **extra)
        texts = [b.text for b in response.content if b.type == "text"]
        calls = tuple(
            ToolCall(id=b.id, name=b.name, arguments=json.dumps(b.input))
            for b in response.content
            if b.type == "tool_use"
        )
        return Message(role="assistant", content="".join(texts) if texts else None, tool_calls=calls)

    return call


def canonical(messages: Any) -> list[Message]:
    """``messages`` with tool-call arguments spelled one way: a tracer may record an Anthropic call's input as the
    SDK's object or as JSON text of its own spacing; the arguments are the same."""
    return [
        m.model_copy(update={"tool_calls": tuple(
            c.model_copy(update={"arguments": json.dumps(c.parsed_arguments, sort_keys=True)}) for c in m.tool_calls
        )})
        for m in messages
    ]  # fmt: skip
