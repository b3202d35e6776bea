"""Prompt caches of the fake provider servers, simulated as the providers document them.

A prompt is a sequence of blocks (tool definitions, the system prompt, each message or content block), each with
a length in characters; a prefix's token count is ``ceil(chars / 4)``, the simulated model's own estimate, so the
cached counts always fit inside the ``input_tokens`` the fakes report. A prefix is identified by a hash over its
blocks. A cache entry becomes readable only once the request that wrote it has started answering (after the
simulated latency), as the real caches do, so concurrent requests with one prefix all miss.

- **Anthropic** (explicit): only prefixes ending at a ``cache_control`` breakpoint are written, and only when at least
  the model's minimum (1024 tokens for Sonnet and Opus 4.x, 4096 for Opus 4.5 and Haiku 4.5, 2048 for Haiku 3.x).
  A request reads the longest cached prefix ending at a breakpoint or at one of the ~20 block boundaries before it;
  usage reports ``cache_read_input_tokens`` (read), ``cache_creation_input_tokens`` (written beyond the read) and
  ``input_tokens`` (the rest). Entries live 5 minutes (``"ttl": "1h"``: an hour), refreshed on every read.
- **OpenAI** (implicit): prompts of at least 1024 tokens are cached; a request reads the longest previously seen
  prefix, rounded down to 128-token increments (none below 1024), reported as ``cached_tokens``.
- **Gemini** (implicit): as OpenAI, above the model's minimum (1024 tokens for Flash, 4096 for Pro), with no
  rounding, reported as ``cachedContentTokenCount``.

Example:
    >>> cache = PromptCache()
    >>> blocks = [Block("system", 8000, breakpoint=True), Block("user", 40, breakpoint=True)]
    >>> cache.anthropic("claude-sonnet-4-5", blocks, total=2010).cache_write_tokens
    2010
    >>> cache.anthropic("claude-sonnet-4-5", blocks, total=2010).cached_input_tokens
    2010
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from delta_eval.adapters.simulated import tool_chars
from delta_eval.calls import ModelRequest
from delta_eval.memo import IdentityMemo
from delta_eval.schema import Message, ToolSpec, Usage

__all__ = [
    "Block",
    "PromptCache",
    "anthropic_blocks",
    "anthropic_minimum",
    "gemini_minimum",
    "request_blocks",
]

_LOOKBACK = 20  # block boundaries Anthropic checks before a breakpoint
_OPENAI_MIN, _OPENAI_STEP = 1024, 128


@dataclass(frozen=True)
class Block:
    """One block of a prompt: what identifies it, its length in characters, whether a breakpoint ends it (and the
    entry's time to live in seconds)."""

    key: str
    chars: int
    breakpoint: bool = False
    ttl_s: float = 300.0


def anthropic_minimum(model: str) -> int:
    """The fewest tokens Anthropic caches for ``model`` (its prompt-caching guide)."""
    if "haiku-4" in model or "opus-4-5" in model or "opus-4-6" in model or "opus-4-7" in model:
        return 4096
    if "haiku" in model:
        return 2048
    return 1024


def gemini_minimum(model: str) -> int:
    """The fewest tokens Gemini's implicit cache caches for ``model``."""
    return 4096 if "pro" in model else 1024


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content or [] if isinstance(b, dict) and b.get("type") == "text")


def _key(role: str, value: Any) -> str:
    if isinstance(value, dict):
        value = {k: v for k, v in value.items() if k != "cache_control"}  # a breakpoint is not content
    return role + ":" + json.dumps(value, sort_keys=True, ensure_ascii=False)


def _ttl(block: Any) -> tuple[bool, float]:
    control = block.get("cache_control") if isinstance(block, dict) else None
    if not isinstance(control, dict):
        return False, 300.0
    return True, 3600.0 if control.get("ttl") == "1h" else 300.0


def _anthropic_chars(block: dict[str, Any]) -> int:
    # What the fake counts as the prompt (the canonical message's text and arguments), so the sums agree.
    kind = block.get("type")
    if kind == "text":
        return len(block.get("text") or "")
    if kind == "tool_use":
        return len(json.dumps(block.get("input", {})))
    if kind == "tool_result":
        return len(_text(block.get("content")))
    return 0


def anthropic_blocks(body: dict[str, Any]) -> list[Block]:
    """The blocks of a Messages API request body, in Anthropic's cache order: tools, system, messages."""
    out: list[Block] = []
    for tool in body.get("tools") or []:
        # Counted as the simulated model counts a tool's definition (see tool_chars), so the cached prefix fits.
        chars = len(tool.get("name") or "") + len(tool.get("description") or "")
        chars += len(json.dumps(tool.get("input_schema") or {}))
        out.append(Block(_key("tool", tool), chars, *_ttl(tool)))
    system = body.get("system")
    for block in [{"type": "text", "text": system}] if isinstance(system, str) else system or []:
        out.append(Block(_key("system", block), len(block.get("text") or ""), *_ttl(block)))
    for turn in body.get("messages") or []:
        content = turn.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        for block in blocks:
            out.append(Block(_key(turn["role"], block), _anthropic_chars(block), *_ttl(block)))
    return out


def _tools_block(tools: tuple[ToolSpec, ...]) -> Block:
    return Block(_key("tools", [t.model_dump(mode="json") for t in tools]), tool_chars(tools))


def _message_block(m: Message) -> Block:
    chars = len(m.content or "") + sum(len(c.arguments) for c in m.tool_calls)
    return Block(_key(m.role, m.model_dump(mode="json", exclude={"reasoning"})), chars)


#: The blocks of the tool definitions and messages of recent requests, by identity: a fake server hands out the same
#: objects for the parts a conversation's requests repeat (see :mod:`.decoded`), so each request builds only the
#: blocks of what it adds (dumping each message of the history to JSON again was a large part of a server's CPU).
_TOOLS = IdentityMemo[Block](maxsize=256)
_MESSAGES = IdentityMemo[Block](maxsize=8192)


def request_blocks(request: ModelRequest) -> list[Block]:
    """The blocks of a canonical request (tools, then each message), for the implicit caches."""
    return [_TOOLS.get(request.tools, _tools_block), *(_MESSAGES.get(m, _message_block) for m in request.messages)]


#: How many of its prefixes' hashes a prompt cache keeps (see :func:`_prefixes`) before it starts again, and how much
#: of the blocks' text they may hold (the keys are a message's JSON).
_CHAIN_MAX, _CHAIN_CHARS = 32_768, 8_000_000
_EMPTY = hashlib.sha256()  # (only ever copied)


@dataclass
class _Chain:
    """Each prefix's hash by the hash of the prefix before it and the block that ends it, with the hash's state to
    go on from; ``chars``: the length of the blocks' keys held."""

    steps: dict[tuple[str, str], tuple[str, Any]] = field(default_factory=dict)
    chars: int = 0


def _prefixes(blocks: Iterable[Block], total: int, chain: _Chain) -> tuple[list[str], list[int]]:
    """The hash and token count of every prefix (through block i: SHA-256 of each block's key and a zero byte, in
    order); token counts capped at ``total``. The hashes are kept in ``chain``: a conversation's requests repeat its
    history, whose prefixes are then hashed once, not at every request."""
    digest, prev = _EMPTY, ""
    hashes, tokens, chars = [], [], 0
    for b in blocks:
        step = chain.steps.get((prev, b.key))
        if step is None:
            following = digest.copy()
            following.update(b.key.encode())
            following.update(b"\x00")
            step = (following.hexdigest(), following)
            if len(chain.steps) >= _CHAIN_MAX or chain.chars > _CHAIN_CHARS:
                chain.steps.clear()  # (recent conversations hashed again, once)
                chain.chars = 0
            chain.steps[(prev, b.key)] = step
            chain.chars += len(b.key)
        prev, digest = step
        hashes.append(prev)
        chars += b.chars
        tokens.append(min(total, math.ceil(chars / 4)))
    return hashes, tokens


@dataclass
class _Entry:
    readable_at: float
    expires_at: float
    ttl_s: float


@dataclass
class PromptCache:
    """The prompt caches of one fake server, per model. ``clock`` is monotonic seconds (a test may pass its own)."""

    clock: Callable[[], float] = time.monotonic
    _entries: dict[tuple[str, str], _Entry] = field(default_factory=dict)
    _chain: _Chain = field(default_factory=_Chain)

    def _live(self, model: str, digest: str, now: float) -> _Entry | None:
        entry = self._entries.get((model, digest))
        if entry is None or entry.readable_at > now or entry.expires_at < now:
            return None
        return entry

    def _write(self, model: str, digest: str, now: float, ready_in_s: float, ttl_s: float) -> None:
        if (model, digest) not in self._entries or self._entries[(model, digest)].expires_at < now:
            self._entries[(model, digest)] = _Entry(now + ready_in_s, now + ready_in_s + ttl_s, ttl_s)

    def anthropic(self, model: str, blocks: list[Block], *, total: int, ready_in_s: float = 0.0) -> Usage:
        """Input usage of an Anthropic request with these blocks and ``total`` input tokens (reads, writes)."""
        now, minimum = self.clock(), anthropic_minimum(model)
        hashes, tokens = _prefixes(blocks, total, self._chain)
        breakpoints = [i for i, b in enumerate(blocks) if b.breakpoint]
        read_at = -1
        for bp in breakpoints:
            for j in range(bp, max(-1, bp - _LOOKBACK - 1), -1):
                if self._live(model, hashes[j], now) is not None:
                    read_at = max(read_at, j)
                    break
        read = tokens[read_at] if read_at >= 0 else 0
        if read_at >= 0:
            entry = self._entries[(model, hashes[read_at])]
            entry.expires_at = now + entry.ttl_s  # a read refreshes the entry
        written = [bp for bp in breakpoints if bp > read_at and tokens[bp] >= minimum and tokens[bp] > read]
        for bp in written:
            self._write(model, hashes[bp], now, ready_in_s, blocks[bp].ttl_s)
        write = tokens[written[-1]] - read if written else 0
        return Usage(input_tokens=total, cached_input_tokens=read, cache_write_tokens=write)

    def implicit(
        self, model: str, blocks: list[Block], *, total: int, minimum: int, step: int = 1, ready_in_s: float = 0.0
    ) -> Usage:
        """Input usage of a request to an implicit cache (OpenAI: ``minimum=1024, step=128``; Gemini: its
        model's minimum, ``step=1``): the longest cached prefix, rounded down to ``step``; every prefix of a prompt
        of at least ``minimum`` tokens is cached by it."""
        now = self.clock()
        hashes, tokens = _prefixes(blocks, total, self._chain)
        matched = max((t for h, t in zip(hashes, tokens, strict=True) if self._live(model, h, now)), default=0)
        cached = (matched // step) * step if matched >= minimum else 0
        if total >= minimum:
            for h, t in zip(hashes, tokens, strict=True):
                if t >= minimum:
                    self._write(model, h, now, ready_in_s, 600.0)
        return Usage(input_tokens=total, cached_input_tokens=cached)

    def openai(self, model: str, blocks: list[Block], *, total: int, ready_in_s: float = 0.0) -> Usage:
        """Input usage of an OpenAI request (Chat Completions or Responses)."""
        return self.implicit(model, blocks, total=total, minimum=_OPENAI_MIN, step=_OPENAI_STEP, ready_in_s=ready_in_s)

    def gemini(self, model: str, blocks: list[Block], *, total: int, ready_in_s: float = 0.0) -> Usage:
        """Input usage of a Gemini request."""
        return self.implicit(model, blocks, total=total, minimum=gemini_minimum(model), ready_in_s=ready_in_s)
