"""Prompt caching: the Anthropic adapter's ``cache_control`` breakpoints, OpenAI's ``prompt_cache_key``, and the
fakes' caches as the providers document them, through the real SDKs."""

from __future__ import annotations

from typing import Any

import pytest

from delta_eval.adapters.prompt_cache import add_cache_breakpoints
from delta_eval.calls import ModelRequest
from delta_eval.schema import Message
from delta_eval.testing.servers.anthropic import FakeAnthropicServer
from delta_eval.testing.servers.gemini import FakeGeminiServer
from delta_eval.testing.servers.openai import FakeOpenAIServer
from delta_eval.testing.servers.prompt_cache import Block, PromptCache
from tests.adapters.support import WEATHER, call

KEY = "sk-test-not-a-real-key"
LONG = "You are a careful airline agent. Follow the policy to the letter. " * 100  # ~1,650 tokens


def turns(k: int) -> tuple[Message, ...]:
    """The context of turn ``k`` of one conversation: a long system prompt and k user/assistant exchanges."""
    out = [Message(role="system", content=LONG)]
    for i in range(k):
        out.append(Message(role="user", content=f"Question {i}: " + "details " * 30))
        if i < k - 1:
            out.append(Message(role="assistant", content=f"Answer {i}."))
    return tuple(out)


def ask(model: str, server: Any, messages: tuple[Message, ...], **options: Any) -> Any:
    url = server.base_url if isinstance(server, FakeOpenAIServer) else server.url
    req = ModelRequest(model=model, messages=messages, tools=(WEATHER,), conversation_id="conv-1")
    return call(model, {"base_url": url, "api_key": KEY, **options}, req).response.usage


def test_anthropic_requests_carry_three_breakpoints_and_the_system_as_blocks() -> None:
    with FakeAnthropicServer() as server:
        ask("anthropic:claude-sonnet-4-5", server, turns(2))
        ask("anthropic:claude-sonnet-4-5", server, turns(2), prompt_cache=False, cache_ttl="1h")
    on, off = (r.json() for r in server.requests)
    assert on["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert on["system"] == [{"type": "text", "text": LONG, "cache_control": {"type": "ephemeral"}}]
    assert on["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in str(off)
    assert isinstance(off["system"], str)


def test_breakpoints_skip_thinking_and_never_exceed_four() -> None:
    thinking = {"type": "thinking", "thinking": "...", "signature": "sig"}
    body = {"messages": [{"role": "assistant", "content": [{"type": "text", "text": "hi"}, thinking]}]}
    add_cache_breakpoints(body, "1h")
    assert body["messages"][0]["content"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert "cache_control" not in thinking  # the reasoning state's block is never changed
    marked = {"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}
    full = {"system": [marked] * 4, "tools": [{"name": "t"}], "messages": [{"role": "user", "content": "hi"}]}
    add_cache_breakpoints(full)
    assert "cache_control" not in full["tools"][0]
    assert full["messages"][0]["content"] == "hi"


def test_the_fake_anthropic_cache_writes_at_breakpoints_and_the_next_turn_reads_them() -> None:
    model = "anthropic:claude-sonnet-4-5"
    with FakeAnthropicServer() as server:
        first = ask(model, server, turns(1))
        second = ask(model, server, turns(2))
        uncached = ask(model, server, turns(3), prompt_cache=False)
    assert first.cached_input_tokens == 0
    assert first.cache_write_tokens == first.input_tokens  # the whole prompt, up to its last breakpoint
    assert second.cached_input_tokens == first.input_tokens  # what turn 1 wrote
    assert second.cache_write_tokens == second.input_tokens - first.input_tokens
    assert (uncached.cached_input_tokens, uncached.cache_write_tokens) == (0, 0)  # no breakpoint, no cache


def test_anthropic_caches_nothing_below_the_models_minimum() -> None:
    cache = PromptCache()
    short = [Block("system", 4000, breakpoint=True)]  # 1,000 tokens
    assert cache.anthropic("claude-sonnet-4-5", short, total=1000).cache_write_tokens == 0
    long = [Block("system", 8000, breakpoint=True)]  # 2,000 tokens: enough for Sonnet, not for Haiku 4.5
    assert cache.anthropic("claude-sonnet-4-5", long, total=2000).cache_write_tokens == 2000
    assert cache.anthropic("claude-haiku-4-5", long, total=2000).cache_write_tokens == 0


def test_an_anthropic_entry_is_readable_only_once_its_writer_answers() -> None:
    now = [0.0]
    cache = PromptCache(clock=lambda: now[0])
    blocks = [Block("system", 8000, breakpoint=True)]
    assert cache.anthropic("claude-sonnet-4-5", blocks, total=2000, ready_in_s=1.0).cache_write_tokens == 2000
    assert cache.anthropic("claude-sonnet-4-5", blocks, total=2000).cached_input_tokens == 0  # still in flight
    now[0] = 1.5
    assert cache.anthropic("claude-sonnet-4-5", blocks, total=2000).cached_input_tokens == 2000
    now[0] = 1000.0  # 5 minutes without a read: gone
    assert cache.anthropic("claude-sonnet-4-5", blocks, total=2000).cached_input_tokens == 0


def test_openai_caches_long_prefixes_in_128_token_steps_and_gets_the_conversation_key() -> None:
    model = "openai:gpt-4.1-mini"
    with FakeOpenAIServer() as server:
        first = ask(model, server, turns(1), prompt_cache_key=True)
        second = ask(model, server, turns(3), prompt_cache_key=True)
        ask(model, server, turns(1))  # to a base_url: no key unless asked
    assert first.cached_input_tokens == 0
    assert second.cached_input_tokens >= 1024
    assert second.cached_input_tokens % 128 == 0
    assert first.input_tokens - 128 < second.cached_input_tokens <= first.input_tokens  # turn 1's prompt, rounded
    sent = [r.json() for r in server.requests]
    assert sent[0]["prompt_cache_key"] == sent[1]["prompt_cache_key"]
    assert sent[0]["prompt_cache_key"].startswith("de-")
    assert "conv-1" not in sent[0]["prompt_cache_key"]
    assert "prompt_cache_key" not in sent[2]


def test_gemini_reports_implicit_cache_hits_above_its_minimum() -> None:
    model = "gemini:gemini-2.5-flash"
    with FakeGeminiServer() as server:
        first = ask(model, server, turns(1))
        second = ask(model, server, turns(2))
    assert first.cached_input_tokens == 0
    assert second.cached_input_tokens == first.input_tokens
    cache = PromptCache()
    blocks = [Block("system", 8000)]  # 2,000 tokens: below Pro's minimum
    cache.gemini("gemini-2.5-pro", blocks, total=2000)
    assert cache.gemini("gemini-2.5-pro", blocks, total=2000).cached_input_tokens == 0


def test_prefix_hashes_kept_are_the_hashes_of_the_prefixes_and_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each prefix's hash is SHA-256 of its blocks' keys, each followed by a zero byte, whether hashed now or kept
    from an earlier request; a prompt cache keeps a bounded number of them (and of their keys' text), its own."""
    import hashlib

    from delta_eval.testing.servers import prompt_cache

    monkeypatch.setattr(prompt_cache, "_CHAIN_MAX", 7)
    monkeypatch.setattr(prompt_cache, "_CHAIN_CHARS", 60)
    cache, other = prompt_cache.PromptCache(), prompt_cache.PromptCache()
    history = [prompt_cache.Block(f"user:{'é' * (i % 5)}{i}", 10) for i in range(12)]
    for n in [*range(1, 13), 12, 3, 12]:
        blocks = history[:n]
        hashes, _ = prompt_cache._prefixes(blocks, 10_000, cache._chain)
        digest, want = hashlib.sha256(), []
        for b in blocks:
            digest.update(b.key.encode() + b"\x00")
            want.append(digest.hexdigest())
        assert hashes == want
        assert len(cache._chain.steps) <= 7
        assert cache._chain.chars <= 60 + max(len(b.key) for b in history)
    assert other._chain.steps == {}
