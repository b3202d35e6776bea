"""The Harmony reader: property-based round trips, plain text left alone, and a gpt-oss reply through the
``openai:`` adapter and the real SDK."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

import delta_eval as de
from delta_eval.adapters.harmony import HarmonyMessage, has_markers, parse, render, split_messages
from delta_eval.schema import Message
from delta_eval.testing.servers.openai import FakeOpenAIServer
from tests.adapters.support import TOOL_ROUND, call, request

TOKENS = ("<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|call|>", "<|return|>")
#: Content a model may write: anything but Harmony's own special tokens.
content = st.text(max_size=40).filter(lambda s: not any(t in s for t in TOKENS))
names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,15}", fullmatch=True)
arguments = st.dictionaries(names, st.one_of(st.integers(), st.text(max_size=10), st.booleans()), max_size=3)


@st.composite
def harmony_messages(draw: st.DrawFn) -> HarmonyMessage:
    kind = draw(st.sampled_from(["analysis", "final", "preamble", "call"]))
    if kind == "call":
        args = json.dumps(draw(arguments))
        return HarmonyMessage("commentary", args, recipient=f"functions.{draw(names)}", end="call")
    channel = "commentary" if kind == "preamble" else kind
    return HarmonyMessage(channel, draw(content), end=draw(st.sampled_from(["end", "return"])))


@given(st.lists(harmony_messages(), min_size=1, max_size=6))
def test_messages_survive_rendering_and_reading(messages: list[HarmonyMessage]) -> None:
    assert split_messages(render(messages)) == messages


@given(st.lists(harmony_messages(), min_size=1, max_size=6))
def test_a_reply_reads_into_reasoning_text_and_calls(messages: list[HarmonyMessage]) -> None:
    reply = parse(render(messages))
    thoughts = [m.content for m in messages if m.channel == "analysis"]
    texts = [m.content for m in messages if m.channel != "analysis" and m.recipient is None]
    calls = [m for m in messages if m.recipient is not None]
    assert reply.reasoning == ("\n".join(thoughts) if thoughts else None)
    assert reply.text == ("\n".join(texts) if texts else None)
    assert [(c.name, json.loads(c.arguments)) for c in reply.calls] == [
        (m.recipient.removeprefix("functions."), json.loads(m.content)) for m in calls if m.recipient
    ]
    assert len({c.id for c in reply.calls}) == len(reply.calls)


@given(st.text(max_size=200).filter(lambda s: "<|message|>" not in s))
def test_plain_text_is_left_unchanged(text: str) -> None:
    assert not has_markers(text)
    reply = parse(text)
    assert (reply.text, reply.reasoning, reply.calls) == (text, None, ())


@given(st.lists(harmony_messages(), min_size=1, max_size=4), st.integers(min_value=0))
def test_a_reply_cut_anywhere_never_fails(messages: list[HarmonyMessage], cut: int) -> None:
    text = render(messages)
    parse(text[: cut % (len(text) + 1)])


def test_the_documented_shapes() -> None:
    reply = parse(
        "<|channel|>analysis<|message|>User wants weather.<|end|><|start|>assistant<|channel|>commentary "
        'to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}<|call|>'
    )
    assert reply.reasoning == "User wants weather."
    assert reply.text is None
    assert [(c.name, c.arguments) for c in reply.calls] == [("get_weather", '{"city":"Paris"}')]
    # the recipient may also stand in the role part of the header
    other = parse('<|start|>assistant to=functions.lookup<|channel|>commentary json<|message|>{"id": 3}<|call|>')
    assert [(c.name, c.arguments) for c in other.calls] == [("lookup", '{"id": 3}')]
    assert parse("<|channel|>final<|message|>Hello<|return|>").text == "Hello"
    only_thinking = parse("<|channel|>analysis<|message|>Hmm.<|end|>")
    assert (only_thinking.text, only_thinking.calls) == (None, ())


def gpt_oss(req: de.ModelRequest) -> Message:
    """A gpt-oss model behind a server that returns raw Harmony in ``content``."""
    if req.messages[-1].role == "tool":
        messages = [HarmonyMessage("analysis", "It is 18."), HarmonyMessage("final", "It is 18 C.", end="return")]
    else:
        messages = [
            HarmonyMessage("analysis", "Need the weather."),
            HarmonyMessage("commentary", '{"city":"Paris"}', recipient="functions.get_weather", end="call"),
        ]
    return Message(role="assistant", content=render(messages))


@pytest.mark.parametrize("stream", [False, True])
def test_the_chat_adapter_reads_harmony_content(stream: bool) -> None:
    model = "openai:gpt-oss-120b"
    with FakeOpenAIServer(respond=gpt_oss) as server:
        opts = {"base_url": server.base_url, "api_key": "k"}
        first = call(model, opts, request(model, stream=stream)).response
        second = call(model, opts, request(model, TOOL_ROUND, stream=stream)).response
    assert first.message.content is None
    assert [(c.name, c.arguments) for c in first.message.tool_calls] == [("get_weather", '{"city":"Paris"}')]
    assert first.finish_reason == "tool_calls"
    assert first.message.reasoning is not None
    assert first.message.reasoning.summary == "Need the weather."
    assert second.message.content == "It is 18 C."
    assert second.finish_reason == "stop"
