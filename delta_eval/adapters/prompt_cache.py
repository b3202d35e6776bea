"""Help the providers' prompt caches: the turns of one replayed conversation share their prefix (tools, system
prompt, the history so far), so each turn after the first can read what the turn before it wrote.

- **Anthropic** caches only what a request marks: :func:`add_cache_breakpoints` puts ``cache_control`` breakpoints
  on the last tool definition, on the system prompt (sent as a list of text blocks for that) and on the last
  block of the history, so that turn k+1 (and the next tool round of turn k) reads the prefix turn k wrote.
  Anthropic takes at most 4 breakpoints a request; these are 3, and none is added beyond 4 when ``params.extra``
  brings its own. Thinking blocks and empty text blocks cannot carry one: the last block that can is marked.
- **OpenAI** caches every long prompt by itself; :func:`prompt_cache_key` gives the key that routes the requests of
  one conversation to the same cache (a hash of the conversation id, so no customer id leaves the process).
- **Gemini** caches implicitly and takes no hint.

Example:
    >>> body = {"system": "Be brief.", "messages": [{"role": "user", "content": "hi"}]}
    >>> add_cache_breakpoints(body)["system"]
    [{'type': 'text', 'text': 'Be brief.', 'cache_control': {'type': 'ephemeral'}}]
    >>> body["messages"][-1]["content"]
    [{'type': 'text', 'text': 'hi', 'cache_control': {'type': 'ephemeral'}}]
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal

__all__ = ["MAX_BREAKPOINTS", "CacheTTL", "add_cache_breakpoints", "prompt_cache_key"]

#: Anthropic's limit of ``cache_control`` breakpoints in one request.
MAX_BREAKPOINTS = 4
CacheTTL = Literal["5m", "1h"]
_UNMARKABLE = {"thinking", "redacted_thinking"}


def _count(body: dict[str, Any]) -> int:
    """Breakpoints the body already has (from ``params.extra``)."""
    blocks: list[Any] = list(body.get("tools") or [])
    if isinstance(body.get("system"), list):
        blocks += body["system"]
    for turn in body.get("messages") or []:
        if isinstance(turn.get("content"), list):
            blocks += turn["content"]
    return sum(1 for b in blocks if isinstance(b, dict) and "cache_control" in b)


def _markable(block: Any) -> bool:
    if not isinstance(block, dict) or block.get("type") in _UNMARKABLE:
        return False
    return block.get("type") != "text" or bool(block.get("text"))


def add_cache_breakpoints(body: dict[str, Any], ttl: CacheTTL = "5m") -> dict[str, Any]:
    """Mark ``body`` (a Messages API request body, changed in place and returned) for Anthropic's prompt cache:
    the last tool, the system prompt and the last markable block of the history; an entry lives ``ttl``."""
    control: dict[str, Any] = {"type": "ephemeral"} if ttl == "5m" else {"type": "ephemeral", "ttl": ttl}
    room = MAX_BREAKPOINTS - _count(body)
    tools = body.get("tools")
    if room > 0 and tools and "cache_control" not in tools[-1]:
        tools[-1] = {**tools[-1], "cache_control": control}
        room -= 1
    system = body.get("system")
    if room > 0 and isinstance(system, str) and system:
        body["system"] = [{"type": "text", "text": system, "cache_control": control}]
        room -= 1
    messages = body.get("messages") or []
    if room > 0 and messages:
        last = messages[-1]
        content = last.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
        for k in range(len(blocks) - 1, -1, -1):
            if _markable(blocks[k]):
                if "cache_control" not in blocks[k]:
                    # A copy: the blocks may be a thinking model's turn kept verbatim in the replay's state.
                    blocks[k] = {**blocks[k], "cache_control": control}
                    messages[-1] = {**last, "content": blocks}
                break
    return body


def prompt_cache_key(conversation_id: str | None) -> str | None:
    """The ``prompt_cache_key`` of a conversation's requests: the same for every turn of it, and no id in clear."""
    if not conversation_id:
        return None
    return "de-" + hashlib.sha256(conversation_id.encode("utf-8")).hexdigest()[:32]
