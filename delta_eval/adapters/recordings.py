"""An index from a conversation prefix to what was recorded next, for the ``simulated:`` model.

The simulated model is a stand-in for a real one in demos and tests: to answer plausibly it looks up the context
it is given among the recorded conversations and finds what production said next. This is a side channel of the
simulation only; real adapters never see it, and it never enters a prompt.

Prefixes are fingerprinted without the system prompt (a variant may replace it) and without tool-call ids (random
per response), with arguments in canonical JSON.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from typing import Any

from delta_eval.matching import canonical_arguments
from delta_eval.memo import IdentityMemo, PrefixFold
from delta_eval.schema import Conversation, Message, ToolSpec

__all__ = ["RecordingIndex", "prefix_key", "prefix_keys", "visible_key"]


#: Fingerprints of messages seen lately: the requests of one conversation share its messages, and fingerprinting
#: each again for every request of a long conversation made its replay quadratic.
_SEEN = IdentityMemo[bytes](maxsize=1 << 17)


def _fingerprint(m: Message) -> bytes:
    return _SEEN.get(m, _compute_fingerprint)


def _compute_fingerprint(m: Message) -> bytes:
    calls = [[c.name, canonical_arguments(c)] for c in m.tool_calls]
    return json.dumps([m.role, m.content or "", calls], ensure_ascii=False, separators=(",", ":")).encode() + b"\x00"


def prefix_keys(messages: Sequence[Message]) -> list[str]:
    """Key of every prefix of the non-system messages: ``keys[i]`` covers the first ``i`` of them."""
    h = hashlib.sha256()
    keys = [h.hexdigest()]
    for m in messages:
        if m.role == "system":
            continue
        h.update(_fingerprint(m))
        keys.append(h.hexdigest())
    return keys


def _hash_step(h: Any, m: Message) -> Any:
    if m.role != "system":
        h.update(_fingerprint(m))
    return h


#: The digest state of the non-system messages of the requests of late: a conversation's requests share their
#: history, so each hashes only what it adds (two messages of one fingerprint hash alike).
_PREFIXES = PrefixFold[Any](
    lambda _: hashlib.sha256(),
    _hash_step,
    copy=lambda h: h.copy(),
)


def prefix_key(messages: Sequence[Message]) -> str:
    """The key of all the non-system messages (the last of :func:`prefix_keys`), hashing only the messages added
    to a prefix hashed lately."""
    return str(_PREFIXES.fold(messages).hexdigest())


class RecordingIndex:
    """Maps a conversation prefix to the assistant message recorded right after it.

    Example:
        >>> idx = RecordingIndex()
        >>> idx.add([Conversation(id="c", messages=(Message(role="user", content="hi"),
        ...                                         Message(role="assistant", content="hello")))])
        >>> idx.next_message([Message(role="system", content="new prompt"), Message(role="user", content="hi")]).content
        'hello'
    """

    def __init__(self) -> None:
        self._next: dict[str, Message] = {}
        # Calls a trace recorded, keyed by their tools as well: two skills of an agent can be sent the same history
        # (a hand-off that keeps only the user's messages) and answer differently.
        self._by_tools: dict[tuple[tuple[str, ...], str], Message] = {}
        # What the user said, for the simulated model playing a session's user: by the conversation's first user
        # message, every user message of it in order (the first conversation holding that opening wins).
        self._users: dict[str, tuple[str, ...]] = {}
        # And by what the user had seen (the user and assistant texts before it), each user message.
        self._user_next: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self._next)

    def add(self, conversations: Iterable[Conversation]) -> None:
        """Index every assistant message of the conversations by the prefix before it."""
        for conv in conversations:
            non_system = [m for m in conv.messages if m.role != "system"]
            users = tuple(m.content or "" for m in non_system if m.role == "user")
            if users:
                self._users.setdefault(users[0], users)
            if users:  # hashed as it grows: a long conversation costs linear time
                seen, h = False, hashlib.sha256()
                for m in non_system:
                    if m.role == "user" and seen:
                        self._user_next.setdefault(h.hexdigest(), m.content or "")
                    if m.role in ("user", "assistant") and m.content:
                        h.update(_visible(m.role, m.content))
                        seen = True
            keys = prefix_keys(non_system)
            for i, m in enumerate(non_system):
                if m.role == "assistant":
                    self._next.setdefault(keys[i], m)
            for call in conv.calls:
                sent = call.input if call.input is not None else conv.messages[: call.message_index]
                answer = conv.messages[call.message_index]
                key = prefix_key(sent)
                self._by_tools.setdefault((_tool_names(call.tools or conv.tools), key), answer)
                if call.input is not None:  # a call sent its own history: answered by its recorded message
                    self._next.setdefault(key, answer)

    def next_message(self, messages: Sequence[Message], tools: Sequence[ToolSpec] = ()) -> Message | None:
        """The recorded assistant message that followed exactly these messages (sent with these tools, where a
        trace recorded the call), if any."""
        key = prefix_key(messages)
        if self._by_tools:
            found = self._by_tools.get((_tool_names(tools), key))
            if found is not None:
                return found
        return self._next.get(key)

    def next_user_message(self, seen: Sequence[tuple[str, str]]) -> str | None:
        """What the recorded user said after exactly these ``(role, text)`` messages (user and assistant texts)."""
        return self._user_next.get(visible_key(seen))

    def user_messages(self, opening: str) -> tuple[str, ...] | None:
        """Every user message, in order, of the recorded conversation whose first user message is ``opening``."""
        return self._users.get(opening)


def _visible(role: str, text: str) -> bytes:
    return json.dumps([role, text], ensure_ascii=False).encode() + b"\x00"


def visible_key(seen: Sequence[tuple[str, str]]) -> str:
    """The key of a sequence of ``(role, text)`` messages as a user saw them."""
    h = hashlib.sha256()
    for role, text in seen:
        h.update(_visible(role, text))
    return h.hexdigest()


def _tool_names(tools: Sequence[ToolSpec]) -> tuple[str, ...]:
    return tuple(sorted(t.name for t in tools))
