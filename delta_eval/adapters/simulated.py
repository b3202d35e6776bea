"""The ``simulated:`` model: a deterministic, seeded stand-in for an LLM, for demos and tests (no network, no cost).

Given a context, it finds among the recorded conversations what production said next (see
:class:`~delta_eval.adapters.recordings.RecordingIndex`) and says that: the same tool call with the same arguments,
or the same reply. Named behaviours make it differ, each at a rate, so that a simulated candidate really differs
from a simulated baseline:

- ``reword_rate``: a reply is reworded: sometimes only in case and punctuation, sometimes with synonyms, sometimes
  with added sentences.
- ``skip_tool_rate``: instead of the recorded tool call, it answers in text.
- ``change_args_rate``: it makes the recorded call with one argument changed.
- ``skip_tools``: tools it never calls: where the recording calls one, it asks the user to confirm instead (a
  candidate that skips a required write action).
- ``latency_ms`` / ``latency_sigma``: each call sleeps for a log-normal time with that median.
- ``rate_limit_rate`` / ``server_error_rate``: a call fails with a 429 (with Retry-After) or a 500.
- ``requests_per_minute`` (and ``minute_s``, the length of that minute, shortened for tests): a true rate limit,
  a token bucket of that many requests refilled over the minute, as OpenAI's is. Every answer carries
  ``x-ratelimit-limit-requests``, ``x-ratelimit-remaining-requests`` and ``x-ratelimit-reset-requests``; a request
  over the limit is answered at once with a 429 and ``retry-after`` (see :class:`RequestBucket`).
- ``dropped_stream_rate``: a call's stream ends before its last event (a retryable failure).
- ``context_window``: a request of more prompt tokens than this fails as too long for the context (not retryable).
- ``cached_fraction`` / ``reasoning_tokens``: the share of prompt tokens reported as read from the provider's
  prompt cache, and the reasoning tokens reported per call (the fake provider servers also think aloud then).
- ``judge_position_bias``: as a judge (a request for a judge's JSON answer, see
  :mod:`delta_eval.adapters.simulated_judge`), how often it picks output A whatever the texts say, where the two
  outputs make the same tool calls.
- As a session's user (a user simulator's request, see :mod:`delta_eval.adapters.simulated_user`), it says what the
  recorded user said next, and ends the session with the stop token when the recorded user had nothing left to say;
  as a session's tool simulator (:mod:`delta_eval.adapters.simulated_tools`), it answers from the recorded examples.

Where the context matches no recording (the replay diverged), it writes a short generic reply that claims nothing.
Every choice is drawn from a hash of (seed, model id, request), so the same request always gets the same answer;
failures are drawn per attempt, so a retried call can succeed. Usage is estimated at four characters per token.

Options of ``simulated:`` model ids are the fields of :class:`SimulatedBehaviour`; a misspelt one is a
:class:`~delta_eval.exceptions.ConfigError`.

Example:
    >>> b = SimulatedBehaviour(reword_rate=0.3, skip_tool_rate=0.05)
    >>> b.reword_rate
    0.3
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import anyio
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from delta_eval.adapters.base import ModelAdapter
from delta_eval.adapters.ratelimit_headers import report_headers
from delta_eval.adapters.recordings import RecordingIndex
from delta_eval.adapters.registry import AdapterContext
from delta_eval.adapters.simulated_judge import is_judge_schema, judge_answer
from delta_eval.adapters.simulated_tools import is_tool_simulator, tool_answer
from delta_eval.adapters.simulated_user import is_user_simulator, user_answer
from delta_eval.calls import ModelRequest, ModelResponse
from delta_eval.exceptions import BadRequestError, ConfigError, RateLimitError, TransientError
from delta_eval.memo import IdentityMemo, PrefixFold
from delta_eval.redact import describe_invalid
from delta_eval.schema import Message, ToolCall, ToolSpec, Usage

__all__ = ["Failure", "SimulatedAdapter", "SimulatedBehaviour", "SimulatedCall", "create", "reword"]

_Rate = Field(default=0.0, ge=0.0, le=1.0)


class SimulatedBehaviour(BaseModel):
    """How a simulated model departs from the recordings. Rates are probabilities per call."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    reword_rate: float = _Rate
    skip_tool_rate: float = _Rate
    change_args_rate: float = _Rate
    rate_limit_rate: float = _Rate
    server_error_rate: float = _Rate
    dropped_stream_rate: float = _Rate
    retry_after_s: float = Field(default=0.0, ge=0.0)
    requests_per_minute: float | None = Field(default=None, gt=0)
    minute_s: float = Field(default=60.0, gt=0)
    latency_ms: float = Field(default=0.0, ge=0.0)
    latency_sigma: float = Field(default=0.5, ge=0.0)
    context_window: int | None = Field(default=None, ge=1)
    cached_fraction: float = _Rate
    reasoning_tokens: int = Field(default=0, ge=0)
    judge_position_bias: float = _Rate
    skip_tools: tuple[str, ...] = ()
    seed: int = 0


Failure = Literal["rate_limit", "server_error", "dropped_stream", "context_length"]


@dataclass(frozen=True)
class SimulatedCall:
    """What the simulated model does with one attempt of a request: how long it takes, whether and how it fails,
    and otherwise what it answers and the usage it reports. The ``simulated:`` adapter and the fake provider
    servers of :mod:`delta_eval.testing` act on the same draw, so they behave alike."""

    latency_s: float
    failure: Failure | None
    message: Message
    usage: Usage


_SYNONYMS = [
    (r"\bCould you please\b", "Can you"),
    (r"\bcould you please\b", "can you"),
    (r"\bI'll\b", "I will"),
    (r"\bI'm\b", "I am"),
    (r"\bassist\b", "help"),
    (r"\bprovide\b", "share"),
    (r"\bconfirm\b", "verify"),
    (r"\bThank you\b", "Thanks"),
    (r"\bhowever\b", "but"),
    (r"\bwould you like\b", "do you want"),
]
_OPENERS = ["Certainly.", "Of course.", "Thanks for your patience.", "Understood."]
_CLOSERS = ["Let me know if there is anything else I can do.", "Is there anything else you need?"]


def reword(text: str, rng: random.Random) -> str:
    """A reworded reply: light (case and punctuation), synonyms, or added sentences, chosen by ``rng``."""
    style = rng.random()
    if style < 0.34:
        changed = text.rstrip(".!") + ("!" if not text.endswith("!") else ".")
        return changed[:1].lower() + changed[1:] if rng.random() < 0.5 else changed
    if style < 0.67:
        out = text
        for pattern, repl in _SYNONYMS:
            out = re.sub(pattern, repl, out)
        if out != text:
            return out
    return f"{rng.choice(_OPENERS)} {text} {rng.choice(_CLOSERS)}"


def _change_one_argument(call: ToolCall, rng: random.Random) -> ToolCall:
    args = call.parsed_arguments
    if not isinstance(args, dict) or not args:
        return call.model_copy(update={"arguments": json.dumps({"note": "changed"})})
    key = sorted(args)[rng.randrange(len(args))]
    value = args[key]
    if isinstance(value, bool):
        new: Any = not value
    elif isinstance(value, int | float):
        new = value + 1
    elif isinstance(value, str):
        new = value[:-1] + ("X" if not value.endswith("X") else "Y") if value else "X"
    else:
        new = None
    return call.model_copy(update={"arguments": json.dumps({**args, key: new}, ensure_ascii=False)})


def _tokens(chars: int) -> int:
    return math.ceil(chars / 4)


def _count_tool_chars(tools: Iterable[ToolSpec]) -> int:
    return sum(len(t.name) + len(t.description) + len(json.dumps(t.parameters)) for t in tools)


#: A request's tools are one tuple for every call of a conversation (a fake server decodes them to the same one too):
#: counted once while kept, not dumped to JSON on every call.
_TOOL_CHARS = IdentityMemo[int](maxsize=256)


def tool_chars(tools: Iterable[ToolSpec]) -> int:
    """The characters of the tool definitions a request sends: providers put them in the prompt and bill them as
    input tokens, so the simulated model counts them too."""
    if isinstance(tools, tuple):  # immutable (of frozen specs): its count cannot change while it is kept
        return _TOOL_CHARS.get(tools, _count_tool_chars)
    return _count_tool_chars(tools)


def _message_chars(m: Message) -> int:
    return len(m.content or "") + sum(len(c.arguments) for c in m.tool_calls)


#: The characters of the messages of the requests of late: each request counts only what it adds to its history.
_CHARS = PrefixFold[int](lambda _: 0, lambda n, m: n + _message_chars(m))


class RequestBucket:
    """A provider's true request limit: a token bucket of ``per_minute`` requests, refilled evenly over ``minute_s``
    seconds (60 for a real minute), as OpenAI's limits work. ``rejected`` counts the requests refused for exceeding it.

    Example:
        >>> bucket = RequestBucket(2, minute_s=60, clock=lambda: 0.0)
        >>> [bucket.take()[0] for _ in range(3)]
        [True, True, False]
        >>> bucket.take()[1]["retry-after"]
        '30'
    """

    def __init__(self, per_minute: float, minute_s: float = 60.0, clock: Any = time.monotonic) -> None:
        self.limit = per_minute
        self.per_s = per_minute / minute_s
        self.tokens = per_minute
        self.rejected = 0
        self._clock = clock
        self._at = clock()

    def take(self) -> tuple[bool, dict[str, str]]:
        """Whether one request is let through now, and the headers its answer carries."""
        now = self._clock()
        self.tokens = min(self.limit, self.tokens + (now - self._at) * self.per_s)
        self._at = now
        admitted = self.tokens >= 1
        if admitted:
            self.tokens -= 1
        else:
            self.rejected += 1
        headers = {
            "x-ratelimit-limit-requests": str(round(self.limit)),
            "x-ratelimit-remaining-requests": str(math.floor(self.tokens)),
            "x-ratelimit-reset-requests": f"{(self.limit - self.tokens) / self.per_s:.3f}s",
        }
        if not admitted:
            wait = (1 - self.tokens) / self.per_s
            headers.update({"retry-after-ms": str(math.ceil(wait * 1000)), "retry-after": str(math.ceil(wait))})
        return admitted, headers


class SimulatedAdapter(ModelAdapter):
    """The ``simulated:`` adapter. ``recordings`` is the index it answers from (empty: generic replies only)."""

    max_concurrency = 64

    def __init__(
        self,
        model: str,
        behaviour: SimulatedBehaviour | None = None,
        recordings: RecordingIndex | None = None,
    ) -> None:
        super().__init__(model)
        self.behaviour = behaviour or SimulatedBehaviour()
        self.recordings = recordings if recordings is not None else RecordingIndex()
        self._attempts: Counter[str] = Counter()
        b = self.behaviour
        self.bucket = RequestBucket(b.requests_per_minute, b.minute_s) if b.requests_per_minute else None

    def cache_identity(self) -> dict[str, Any]:
        """The behaviours that change answers (latency and failure rates do not)."""
        identity = self.behaviour.model_dump(include={"reword_rate", "skip_tool_rate", "change_args_rate", "seed"})
        if self.behaviour.judge_position_bias:  # only when set, so caches of earlier versions stay valid
            identity["judge_position_bias"] = self.behaviour.judge_position_bias
        if self.behaviour.skip_tools:
            identity["skip_tools"] = sorted(self.behaviour.skip_tools)
        return identity

    def _rng(self, *parts: object) -> random.Random:
        digest = hashlib.sha256(json.dumps([self.behaviour.seed, self.model, *parts], default=str).encode()).digest()
        return random.Random(int.from_bytes(digest[:8], "big"))

    def respond(self, request: ModelRequest, key: str | None = None) -> Message:
        """The assistant message for ``request`` (no latency, no failures); ``key`` is its cache key if known."""
        b = self.behaviour
        rng = self._rng(key or request.cache_key_v1())
        fmt = request.params.response_format
        if fmt is not None and fmt.json_schema is not None and is_judge_schema(fmt.json_schema):
            pair = next((m.content for m in reversed(request.messages) if m.role == "user" and m.content
                         and ("<output_a>" in m.content or "<examples>" in m.content)), "")  # fmt: skip
            return Message(role="assistant", content=judge_answer(fmt.json_schema, pair, rng, b.judge_position_bias))
        if is_user_simulator(request):
            return Message(role="assistant", content=user_answer(request.messages[-1].content or "", self.recordings))
        if is_tool_simulator(request):
            return Message(role="assistant", content=tool_answer(request.messages[-1].content or ""))
        recorded = self.recordings.next_message(request.messages, request.tools)
        if recorded is None:
            return Message(role="assistant", content=self._generic_reply(request))
        if recorded.tool_calls:
            skipped = any(c.name in b.skip_tools for c in recorded.tool_calls)
            if skipped or rng.random() < b.skip_tool_rate:
                return Message(
                    role="assistant",
                    content="Before I go ahead, could you confirm the details of your request once more?",
                )
            calls = []
            for k, call in enumerate(recorded.tool_calls):
                call_id = f"sim_{rng.getrandbits(48):012x}_{k}"
                new = call.model_copy(update={"id": call_id})
                if rng.random() < b.change_args_rate:
                    new = _change_one_argument(new, rng)
                calls.append(new)
            return Message(role="assistant", content=recorded.content, tool_calls=tuple(calls))
        text = recorded.content or ""
        if rng.random() < b.reword_rate:
            text = reword(text, rng)
        return Message(role="assistant", content=text)

    @staticmethod
    def _generic_reply(request: ModelRequest) -> str:
        last = request.messages[-1] if request.messages else None
        if last is not None and last.role == "tool":
            return (
                "I'm sorry, I wasn't able to complete that step just now. "
                "Could you tell me how you would like to proceed?"
            )
        return "Could you tell me a little more about what you need, so I can help?"

    def draw(self, request: ModelRequest) -> SimulatedCall:
        """One attempt at ``request``: seeded by the request and the attempt number, so a retry can succeed."""
        b = self.behaviour
        # The key of cache key version 1 under no namespace, which seeded answers before version 2: the same request
        # gets the same answer as it did then (chained on the conversation's history, it costs what the call adds).
        key = request.cache_key_v1()
        self._attempts[key] += 1
        rng = self._rng(key, "attempt", self._attempts[key])
        latency = rng.lognormvariate(math.log(b.latency_ms), b.latency_sigma) / 1000 if b.latency_ms > 0 else 0.0
        prompt_chars = tool_chars(request.tools) + _CHARS.fold(request.messages)
        prompt = _tokens(prompt_chars)
        failure: Failure | None = None
        draw = rng.random()
        if b.context_window is not None and prompt > b.context_window:
            failure = "context_length"
        elif draw < b.rate_limit_rate:
            failure = "rate_limit"
        elif draw < b.rate_limit_rate + b.server_error_rate:
            failure = "server_error"
        elif draw < b.rate_limit_rate + b.server_error_rate + b.dropped_stream_rate:
            failure = "dropped_stream"
        message = self.respond(request, key)
        out_chars = len(message.content or "") + sum(len(c.arguments) + len(c.name) for c in message.tool_calls)
        usage = Usage(
            input_tokens=prompt,
            cached_input_tokens=math.floor(prompt * b.cached_fraction),
            output_tokens=_tokens(out_chars) + b.reasoning_tokens,
            reasoning_tokens=b.reasoning_tokens,
        )
        return SimulatedCall(latency, failure, message, usage)

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """Answer after the simulated latency, or fail as the behaviour says."""
        headers: dict[str, str] = {}
        if self.bucket is not None:
            admitted, headers = self.bucket.take()
            if not admitted:  # over the true limit: refused at once, as a provider does
                report_headers(headers)
                raise RateLimitError(
                    "simulated 429: request limit exceeded", model=self.model, status=429,
                    retry_after=float(headers["retry-after-ms"]) / 1000,
                )  # fmt: skip
        call = self.draw(request)
        if call.latency_s:
            await anyio.sleep(call.latency_s)
        report_headers(headers)
        if call.failure == "rate_limit":
            retry_after = self.behaviour.retry_after_s
            raise RateLimitError(
                "simulated 429: rate limit reached", model=self.model, status=429, retry_after=retry_after
            )
        if call.failure in ("server_error", "dropped_stream"):
            raise TransientError(f"simulated {call.failure.replace('_', ' ')}", model=self.model, status=500)
        if call.failure == "context_length":
            raise BadRequestError(
                "simulated 400: the prompt is longer than the context window", model=self.model, status=400
            )
        return ModelResponse(
            message=call.message,
            finish_reason="tool_calls" if call.message.tool_calls else "stop",
            usage=call.usage,
            served_model=self.model,
        )


def create(model: str, options: Mapping[str, Any], context: AdapterContext) -> SimulatedAdapter:
    """The factory of ``simulated:`` model ids: a simulated model answering from ``context.recordings``."""
    try:
        behaviour = SimulatedBehaviour(**options)
    except ValidationError as exc:
        raise ConfigError(f"bad options for {model}: {describe_invalid(exc)}") from None
    return SimulatedAdapter(model, behaviour, context.recordings)
