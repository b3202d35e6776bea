"""Canonical model calls: what a model is asked (:class:`ModelRequest` with its :class:`GenerateParams`) and what
it answers (:class:`ModelResponse`), in provider-neutral terms.

They sit beside :mod:`delta_eval.schema` so that every stage (replay, judges, the response cache in ``store/``) can
speak them without importing ``adapters/``; adapters translate them to and from a provider's wire format.

The response cache is keyed by :meth:`ModelRequest.cache_key`: a hash of an explicit canonical form of the request
(:meth:`ModelRequest.canonical`) in which every field still at its default is left out, under a format version.
Adding an optional field in a later version therefore leaves the keys of existing requests, and so every cached
answer, unchanged; only setting the new field changes a key. A test pins the key of a fixed request, so a change
that would alter keys anyway (reordered fields, another serialisation) fails until ``CACHE_KEY_VERSION`` is bumped.

Version 2 hashes the namespace after the request's digest rather than before its JSON, so that the turns of a
conversation (each its own pair, so its own namespace) share the hashing of their common history: a call hashes
only the messages it adds (:class:`~delta_eval.memo.PrefixFold`). A cache written under version 1 is read by
:meth:`ModelRequest.cache_key_v1` (see :class:`~delta_eval.store.cache.SQLiteCache`); the version is hashed into
every key, so a key of one version can never name an answer of the other.

Example:
    >>> from delta_eval.schema import Message
    >>> request = ModelRequest(model="openai:gpt-4o", messages=(Message(role="user", content="hi"),))
    >>> request.canonical()
    {'model': 'openai:gpt-4o', 'messages': [{'role': 'user', 'content': 'hi'}]}
    >>> GenerateParams(tool_choice={"name": "get_user"}).tool_choice
    NamedToolChoice(name='get_user')
"""

from __future__ import annotations

import builtins
import hashlib
import json
from json.encoder import encode_basestring_ascii
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from delta_eval.memo import IdentityMemo, PrefixFold
from delta_eval.schema import Message, ToolSpec, Usage

__all__ = [
    "CACHE_KEY_VERSION",
    "CallStats",
    "FinishReason",
    "GenerateParams",
    "ModelRequest",
    "ModelResponse",
    "NamedToolChoice",
    "ReasoningEffort",
    "ResponseFormat",
    "ToolChoice",
    "split_model_id",
]

#: Bumped only when the canonical form changes meaning; every cache key includes it.
CACHE_KEY_VERSION = 2

FinishReason = Literal["stop", "tool_calls", "length", "content_filter", "other"]
ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]


def split_model_id(model: str) -> tuple[str, str]:
    """``"openai:gpt-4o"`` -> ``("openai", "gpt-4o")``.

    Example:
        >>> split_model_id("anthropic:claude-sonnet-4-5")
        ('anthropic', 'claude-sonnet-4-5')
    """
    prefix, sep, name = model.partition(":")
    return (prefix, name) if sep else ("", model)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class NamedToolChoice(_Frozen):
    """Force a call to one named tool."""

    name: str

    def __repr__(self) -> str:
        return f"NamedToolChoice(name={self.name!r})"


#: ``"auto"`` (the model decides), ``"none"`` (no tool calls), ``"required"`` (at least one call), or one tool.
ToolChoice = Literal["auto", "none", "required"] | NamedToolChoice


class ResponseFormat(_Frozen):
    """The shape the answer must take: free ``text``, any ``json_object``, or JSON matching ``json_schema``.

    Example:
        >>> ResponseFormat(name="verdict", json_schema={"type": "object"}).type
        'json_schema'
    """

    type: Literal["text", "json_object", "json_schema"] = "json_schema"
    name: str = "response"
    json_schema: dict[str, Any] | None = None
    strict: bool = True

    @model_validator(mode="after")
    def _schema_matches_type(self) -> ResponseFormat:
        if (self.type == "json_schema") != (self.json_schema is not None):
            raise ValueError("a json_schema response format needs json_schema, and only it takes one")
        return self

    @classmethod
    def from_model(cls, model: builtins.type[BaseModel], name: str | None = None) -> ResponseFormat:
        """The format of answers that validate as ``model`` (its JSON Schema, strict)."""
        return cls(name=name or model.__name__, json_schema=model.model_json_schema())


class GenerateParams(_Frozen):
    """Sampling and output parameters, in provider-neutral terms; ``extra`` passes provider-specific ones through.

    ``None`` means "the provider's default". ``max_tokens`` bounds everything generated, reasoning included.
    ``reasoning_effort`` and ``reasoning_budget`` (a thinking budget in tokens) are sent as the model takes them,
    from the model catalogue: where a model takes only an effort, or only a budget, or only some efforts, the adapter
    sends the nearest setting it takes and says so once in the run's notes; a model that cannot think gets neither.
    ``reasoning_summary`` asks for summaries of the reasoning (OpenAI Responses; its organisation must be verified).
    ``stream`` streams the call (and records the time to the first token). ``extra`` goes into the provider's request
    body as given.
    """

    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    seed: int | None = None
    stop: tuple[str, ...] | None = None
    reasoning_effort: ReasoningEffort | None = None
    reasoning_budget: int | None = Field(default=None, ge=0)
    reasoning_summary: Literal["auto", "concise", "detailed"] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None
    stream: bool | None = None
    extra: dict[str, Any] = Field(default_factory=dict)


class ModelRequest(_Frozen):
    """A canonical request: the model, the messages, the tools offered and the parameters.

    ``conversation_id`` names the recorded conversation a replayed request belongs to: adapters may pass it on as
    a prompt-cache routing hint (OpenAI's ``prompt_cache_key``). It does not decide the answer, so it is left out of
    :meth:`canonical` and of the cache key.
    """

    model: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    params: GenerateParams = GenerateParams()
    conversation_id: str | None = Field(default=None, exclude=True)

    def canonical(self) -> dict[str, Any]:
        """The request as the cache sees it: every field that decides the answer, with defaults left out."""
        data: dict[str, Any] = self.model_dump(mode="json", exclude_defaults=True)
        return data

    def cache_key(self, *, namespace: str = "", identity: dict[str, Any] | None = None) -> str:
        """A stable hash of everything that determines the answer, with ``namespace`` (which side of which pair)
        and the adapter's ``identity`` (see :meth:`~delta_eval.adapters.base.ModelAdapter.cache_identity`).

        Two requests with the same key are the same call: it is what the response cache is keyed by. The key hashes
        the version, namespace and identity with :meth:`digest`, so the turns of a conversation (each of its own
        pair, so of its own namespace) share the digest of their common history.
        """
        digest = hashlib.sha256(_head(CACHE_KEY_VERSION, namespace, identity))
        digest.update(self.digest())
        return digest.hexdigest()

    def digest(self) -> bytes:
        """The sha256 of the JSON of :meth:`canonical` (in field declaration order, pydantic's serialiser), computed
        from the digest state of the longest message prefix hashed lately: each call hashes only the messages it
        adds to an earlier request of its conversation. A prefix is reused when its messages are equal (``==``, the
        same objects mostly); the one pair of equal messages whose JSON differs is one whose opaque reasoning
        ``data`` holds ``1`` in one and ``1.0`` in the other."""
        prefix, tail = self._frame()
        state = _BODY.fold(self.messages, prefix)
        state.update(tail)
        return state.digest()

    def cache_key_v1(self, *, namespace: str = "", identity: dict[str, Any] | None = None) -> str:
        """The key of cache key version 1, for caches written before version 2: the hash of the version, namespace
        and identity, then of the JSON of :meth:`canonical` itself. Chained on the message prefix as :meth:`digest`
        is, but each namespace starts its own chain (the ``simulated:`` model seeds its answers with it, under no
        namespace, so its answers stay what they were)."""
        prefix, tail = self._frame()
        state = _BODY.fold(self.messages, _head(1, namespace, identity) + prefix)
        state.update(tail)
        return state.hexdigest()

    def _frame(self) -> tuple[bytes, bytes]:
        # The JSON of canonical() around its messages: ``{"model":...,"messages":[`` and ``],...}``. The same for
        # every call of a conversation with one model, tools and parameters: kept for those.
        key = (self.model, id(self.tools), id(self.params))
        hit = _FRAMES.get(key)
        if hit is not None and hit[0] is self.tools and hit[1] is self.params:
            return hit[2]
        bare = self.model_copy(update={"messages": ()}).model_dump_json(exclude_defaults=True).encode("utf-8")
        # The first '"messages":[]' is the field: inside a JSON string every quote is escaped.
        at = bare.index(b'"messages":[]') + len(b'"messages":[')
        frame = (bare[:at], bare[at:])
        _FRAMES[key] = (self.tools, self.params, frame)
        if len(_FRAMES) > 1024:  # a frame per conversation (its tools) and model: room for the conversations in flight
            _FRAMES.pop(next(iter(_FRAMES)), None)
        return frame


def _head(version: int, namespace: str, identity: dict[str, Any] | None) -> bytes:
    """``json.dumps([version, namespace, identity or {}], sort_keys=True, separators=(",", ":"))``, encoded, and a
    NUL: put together from its parts, the identity's JSON kept (a run's calls have the same few identities)."""
    return b"[%d,%s,%s]\x00" % (version, encode_basestring_ascii(namespace).encode("ascii"), _identity_json(identity))


def _identity_json(identity: dict[str, Any] | None) -> bytes:
    data = identity or {}
    if not all(type(v) is str for v in data.values()):  # kept by value: only text, which no other type equals
        return json.dumps(data, sort_keys=True, separators=(",", ":")).encode("utf-8")
    key = tuple(sorted(data.items()))
    kept = _IDENTITIES.get(key)
    if kept is None:
        kept = _IDENTITIES[key] = json.dumps(data, sort_keys=True, separators=(",", ":")).encode("utf-8")
        if len(_IDENTITIES) > 256:
            _IDENTITIES.pop(next(iter(_IDENTITIES)), None)
    return kept


def _message_json(message: Message) -> bytes:
    """A message as :meth:`ModelRequest.canonical`'s JSON holds it (kept a while by identity)."""
    return _MESSAGES.get(message, lambda m: m.model_dump_json(exclude_defaults=True).encode("utf-8"))


class _Hashing:
    """The digest state of a request's JSON up to some message, and whether a message was hashed yet."""

    __slots__ = ("sha", "started")

    def __init__(self, sha: Any, started: bool) -> None:
        self.sha, self.started = sha, started

    def copy(self) -> _Hashing:
        return _Hashing(self.sha.copy(), self.started)

    def step(self, message: Message) -> _Hashing:
        if self.started:
            self.sha.update(b",")  # between two messages
        self.sha.update(_message_json(message))
        self.started = True
        return self

    def update(self, data: bytes) -> None:
        self.sha.update(data)

    def digest(self) -> bytes:
        return bytes(self.sha.digest())

    def hexdigest(self) -> str:
        return str(self.sha.hexdigest())


_MESSAGES = IdentityMemo[bytes](maxsize=1 << 14)
_IDENTITIES: dict[tuple[tuple[str, str], ...], bytes] = {}
_FRAMES: dict[tuple[str, int, int], tuple[tuple[ToolSpec, ...], GenerateParams, tuple[bytes, bytes]]] = {}
#: Salted by the bytes hashed before the first message (the frame's start, after a version 1 key's head).
_BODY = PrefixFold[_Hashing](
    lambda start: _Hashing(hashlib.sha256(start), False),
    _Hashing.step,
    copy=_Hashing.copy,
)


class ModelResponse(_Frozen):
    """A canonical response: the assistant message, why it stopped, normalised usage and timing.

    ``served_model`` is the model the provider says answered (it may differ from the one asked for, e.g. a dated
    snapshot); ``request_id`` is the provider's id of the call, for support tickets and logs; ``provider_finish_reason``
    is the provider's own word for why it stopped (``end_turn``, ``MAX_TOKENS``, ...), mapped to ``finish_reason``.
    ``usage`` is ``None`` when the provider reported none (a proxy may strip it): unknown, never counted as 0.
    ``batch`` says it came through the provider's batch API, billed at its batch rate.
    """

    message: Message
    finish_reason: FinishReason = "stop"
    provider_finish_reason: str | None = None
    usage: Usage | None = Usage()
    latency_ms: float = 0.0
    ttft_ms: float | None = None
    served_model: str = ""
    request_id: str | None = None
    batch: bool = False


class CallStats(BaseModel):
    """Counters of one model's calls in a run.

    ``made`` counts every attempt sent to the provider (failed ones included); ``answered`` the attempts that came
    back with a response (what a provider bills); ``cached`` the calls served from the response cache instead;
    ``no_usage`` the answered calls whose response reported no token usage (their tokens and cost are unknown);
    ``lost`` the attempts a killed session sent and never recorded an outcome for (in flight at the kill, or
    failed after its last record): the provider may have answered, and billed, them. ``made`` includes them.
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=False)

    made: int = 0
    answered: int = 0
    cached: int = 0
    retries: int = 0
    failed: int = 0
    rate_limited: int = 0
    no_usage: int = 0
    lost: int = 0

    def __add__(self, other: CallStats) -> CallStats:
        return CallStats(**{name: getattr(self, name) + getattr(other, name) for name in CallStats.model_fields})
