"""Canonical types that every stage speaks.

Adapters translate to and from a provider's wire format at the edge; everything stored or passed between stages is
one of these types, so any recorded conversation can replay on any model.

The shapes follow OpenAI Chat Completions (the most common export format) with two deliberate differences:
tool-call arguments are kept as the exact raw string the model produced (parsed on demand, flagged when not valid
JSON, never lost), a tool result carries where it came from during a replay (recorded, simulated, custom), and the
media of a message (images, files, audio) are :class:`MediaPart` objects beside its text, named by the SHA-256 of
their bytes.

Example:
    >>> call = ToolCall(id="c1", name="get_user", arguments='{"user_id": "mia"}')
    >>> call.parsed_arguments
    {'user_id': 'mia'}
    >>> ToolCall(id="c2", name="f", arguments="{oops").arguments_valid
    False
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import itertools
import json
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any, Literal, overload

from pydantic import BaseModel, ConfigDict, Field, field_serializer, field_validator, model_validator

__all__ = [
    "CallContext",
    "Conversation",
    "ErrorRecord",
    "History",
    "Judgement",
    "MediaKind",
    "MediaPart",
    "Message",
    "Outcome",
    "ReasoningState",
    "Replay",
    "ReplayPoint",
    "Role",
    "SampledConversation",
    "Severity",
    "Side",
    "SimulatorCall",
    "SimulatorRole",
    "Stage",
    "Step",
    "Stratum",
    "ToolCall",
    "ToolResult",
    "ToolSpec",
    "TurnOutput",
    "Usage",
    "UserSource",
    "Verdict",
    "total_usage",
]

Role = Literal["system", "user", "assistant", "tool"]
Side = Literal["baseline", "candidate", "recorded"]
Stage = Literal["deterministic", "equivalence", "judge", "error"]
Outcome = Literal["equivalent", "candidate", "baseline", "tie", "error"]
#: Where a tool result came from: the recording, the failure result of a call that left it (``simulated``), the
#: user's simulator (``custom``), or an LLM playing the tool in a session (``llm``).
ResultSource = Literal["recorded", "simulated", "custom", "llm"]
#: Where a user message of a session came from: the recording (``recorded``) or a user simulator (``simulated``).
UserSource = Literal["recorded", "simulated"]
#: Which simulator of a session made a call: the model playing the user, or the LLM playing a tool.
SimulatorRole = Literal["user_simulator", "tool_simulator"]
#: How bad the worse side's failure was: ``critical`` is e.g. a hallucinated fact or a wrong irreversible action.
Severity = Literal["none", "minor", "critical"]
ErrorStage = Literal["ingest", "sample", "replay", "judge", "run"]
#: What a media part holds: a picture, a document (PDF, text, ...) or a sound.
MediaKind = Literal["image", "file", "audio"]

_INVALID = object()


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ToolCall(_Frozen):
    """One function call made by the assistant.

    ``arguments`` is the raw JSON text as produced; ``parsed_arguments`` parses it lazily and is ``None`` when the
    text is not valid JSON (``arguments_valid`` tells which).
    """

    id: str
    name: str
    arguments: str = "{}"

    @property
    def arguments_valid(self) -> bool:
        """Whether ``arguments`` is valid JSON."""
        return _parse_arguments(self.arguments) is not _INVALID

    @property
    def parsed_arguments(self) -> Any:
        """The arguments as Python values (parsed afresh on each access), or ``None`` when they are not valid JSON."""
        parsed = _parse_arguments(self.arguments)
        return None if parsed is _INVALID else parsed


def _parse_arguments(text: str) -> Any:
    # Parsed on demand and never cached on the instance: model_copy() would carry a stale cache to a copy whose
    # arguments were changed.
    try:
        return json.loads(text) if text.strip() else {}
    except ValueError:
        return _INVALID


class ReasoningState(_Frozen):
    """Reasoning state a provider returned with an assistant message, kept opaque and sent back unchanged.

    Thinking models need it to continue a turn across tool rounds (Anthropic's signed ``thinking`` blocks, Gemini's
    ``thoughtSignature``, the Responses API's ``reasoning`` items). Only adapters of ``provider`` read ``data``, and
    only for ``model`` (signatures do not transfer between models); any other call drops it. ``summary`` is a
    readable summary of the reasoning where the provider gives one.

    Example:
        >>> ReasoningState(provider="gemini", data={"thought_signature": "CiQB"}).provider
        'gemini'
    """

    provider: str
    model: str = ""
    data: Any = None
    summary: str | None = None


class MediaPart(_Frozen):
    """An image, file or audio clip a message carries beside its text.

    ``sha256`` names the content: the hex SHA-256 of the decoded bytes when they are known (``data``), else of the
    URL's text. ``data`` is the bytes in base64; ``url`` is where they live (an ``http(s)`` address, or a
    provider's file URI) when the record gave no bytes. A run folder keeps each distinct ``data`` once, apart from
    the messages (:mod:`delta_eval.store.media`): a part read back from a run's tables without its bytes has
    neither ``data`` nor ``url`` (only its name) until they are restored. ``placeholder`` is the short text that
    stands for the part wherever its bytes must not go (a judge's prompt, a provider that cannot take the kind).

    Build one with :meth:`from_base64`, :meth:`from_bytes` or :meth:`from_url` (which reads a ``data:`` URL into
    its bytes), so that the hash always matches.

    Example:
        >>> part = MediaPart.from_url("image", "data:image/png;base64,iVBORw0KGgo=")
        >>> part.media_type, part.data, part.placeholder
        ('image/png', 'iVBORw0KGgo=', '[image image/png sha256:4c4b6a3be131]')
        >>> MediaPart.from_url("image", "https://example.com/cat.jpg", "image/jpeg").url
        'https://example.com/cat.jpg'
    """

    kind: MediaKind
    media_type: str = ""
    sha256: str
    url: str | None = None
    data: str | None = None
    filename: str | None = None

    @field_validator("sha256")
    @classmethod
    def _hex_digest(cls, value: str) -> str:
        if len(value) != 64 or any(c not in "0123456789abcdef" for c in value):
            raise ValueError("sha256 must be 64 lowercase hex digits")
        return value

    @classmethod
    def from_bytes(cls, kind: MediaKind, raw: bytes, media_type: str = "", *, filename: str | None = None) -> MediaPart:
        """A part holding ``raw``."""
        return cls(kind=kind, media_type=media_type, sha256=hashlib.sha256(raw).hexdigest(),
                   data=base64.b64encode(raw).decode("ascii"), filename=filename)  # fmt: skip

    @classmethod
    def from_base64(cls, kind: MediaKind, data: str, media_type: str = "", *, filename: str | None = None) -> MediaPart:
        """A part holding the base64 text ``data``; raises ``ValueError`` when it is not base64."""
        try:
            raw = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("the media data is not valid base64") from None
        return cls(kind=kind, media_type=media_type, sha256=hashlib.sha256(raw).hexdigest(), data=data,
                   filename=filename)  # fmt: skip

    @classmethod
    def from_url(cls, kind: MediaKind, url: str, media_type: str = "", *, filename: str | None = None) -> MediaPart:
        """A part for ``url``: a ``data:...;base64,`` URL gives its bytes (and its media type), any other URL is kept
        as the address, named by the hash of its text. Raises ``ValueError`` on a malformed ``data:`` URL."""
        if url.startswith("data:"):
            header, sep, payload = url[5:].partition(",")
            if not sep or not header.endswith(";base64"):
                raise ValueError("a data: URL must be data:<media type>;base64,<data>")
            return cls.from_base64(kind, payload, header.removesuffix(";base64") or media_type, filename=filename)
        return cls(kind=kind, media_type=media_type, sha256=hashlib.sha256(url.encode("utf-8")).hexdigest(), url=url,
                   filename=filename)  # fmt: skip

    @property
    def data_url(self) -> str | None:
        """The bytes as a ``data:`` URL, or ``None`` when the part holds no bytes."""
        if self.data is None:
            return None
        return f"data:{self.media_type or 'application/octet-stream'};base64,{self.data}"

    @property
    def placeholder(self) -> str:
        """The text standing for the part where its bytes must not go: kind, media type and a short hash."""
        return f"[{self.kind} {self.media_type or 'unknown type'} sha256:{self.sha256[:12]}]"


class Message(_Frozen):
    """One chat message in canonical form.

    ``tool_calls`` is set on assistant messages that call tools; ``tool_call_id`` and ``name`` on tool results;
    ``reasoning`` on assistant messages of thinking models (see :class:`ReasoningState`). ``media`` holds the
    images, files and audio of the message (mostly user messages and tool results); they come before the text
    ``content`` in the message, whatever their place among its text parts was in the record (one rule every
    adapter and judge follows, and what most recorded messages do).

    Example:
        >>> m = Message(role="user", content="what is this?",
        ...             media=(MediaPart.from_url("image", "https://example.com/a.png", "image/png"),))
        >>> m.text_with_media()
        '[image image/png sha256:494a30704d4f] what is this?'
    """

    role: Role
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    reasoning: ReasoningState | None = None
    media: tuple[MediaPart, ...] = ()

    def text_with_media(self) -> str:
        """The content with each media part's placeholder before it: the message as text, where no bytes may go."""
        return " ".join([*(p.placeholder for p in self.media), *([self.content] if self.content else [])])


class ToolSpec(_Frozen):
    """A tool the assistant may call: its name, description and JSON Schema parameters."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class CallContext(_Frozen):
    """What production sent on the model call that answered with ``messages[message_index]``, as a trace records
    each call: the system prompt and the tools of that moment, and the history as sent when it was not simply every
    message before (an agent that filters or rewrites its history after a hand-off).

    ``system`` is the system prompt sent (``None``: none was); ``tools`` the tools offered (``None``: the trace does
    not say, so the conversation's tools apply); ``input`` the non-system messages sent, when they differ from the
    conversation's messages before ``message_index`` (``None``: they are those).
    """

    message_index: int
    system: str | None = None
    tools: tuple[ToolSpec, ...] | None = None
    input: tuple[Message, ...] | None = None


class Conversation(_Frozen):
    """A recorded conversation: messages, the tools it offered, and metadata fields kept from the source.

    ``calls`` is the context of each recorded model call where the source records it (traces: one span per call),
    in message order; a replay point then gets the system prompt, tools and history of its own call
    (:func:`~delta_eval.replay.points.replay_points`). A plain message log has none: every turn sees the messages
    before it and ``tools``.
    """

    id: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    metadata: dict[str, Any] = Field(default_factory=dict)
    source: str = ""
    record: str = ""
    calls: tuple[CallContext, ...] = ()

    @model_validator(mode="after")
    def _calls_in_order(self) -> Conversation:
        last = -1
        for call in self.calls:
            if not last < call.message_index < len(self.messages):
                raise ValueError(f"calls: message_index {call.message_index} is out of order or past the "
                                 f"{len(self.messages)} messages")  # fmt: skip
            if self.messages[call.message_index].role != "assistant":
                raise ValueError(f"calls: message {call.message_index} is a {self.messages[call.message_index].role} "
                                 "message, not the assistant's answer")  # fmt: skip
            last = call.message_index
        return self


class ToolResult(_Frozen):
    """The result a tool call got: recorded in production, simulated in a replay, or from a custom simulator."""

    call_id: str
    name: str
    content: str
    source: ResultSource = "recorded"


class Step(_Frozen):
    """One round of an assistant turn: what the assistant said and called, and what its calls returned.

    ``reasoning`` is the provider's summary of the model's reasoning in that round, where it gives one. In a
    session (a conversation rolled forward, see :mod:`delta_eval.replay.session`), ``user`` is what the user said
    after this step and ``user_source`` whether it was the recorded message or a user simulator's.
    """

    text: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_results: tuple[ToolResult, ...] = ()
    reasoning: str | None = None
    user: str | None = None
    user_source: UserSource | None = None


class TurnOutput(_Frozen):
    """What the assistant did in one turn: tool-call rounds, then the final text (if it got that far), with the
    reasoning summary of that last answer where the provider gives one."""

    steps: tuple[Step, ...] = ()
    final_text: str | None = None
    final_reasoning: str | None = None

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        """All tool calls of the turn, in order."""
        return tuple(call for step in self.steps for call in step.tool_calls)

    @property
    def texts(self) -> tuple[str, ...]:
        """Every text the assistant wrote in the turn, in order (narration beside tool calls, then the final text)."""
        out = [step.text for step in self.steps if step.text]
        if self.final_text:
            out.append(self.final_text)
        return tuple(out)


class SampledConversation(_Frozen):
    """A conversation of the sample as a run keeps it: where it came from, its stratum and sampling weight, how many
    turns it has and how many of them are replayed (``n_pairs``), and its content."""

    conversation_id: str
    source: str = ""
    record: str = ""
    position: int
    stratum: str
    weight: float
    n_messages: int
    n_turns: int
    n_pairs: int
    metadata: dict[str, Any] = Field(default_factory=dict)
    messages: tuple[Message, ...] = ()
    tools: tuple[ToolSpec, ...] = ()
    calls: tuple[CallContext, ...] = ()

    @classmethod
    def of(
        cls, conversation: Conversation, *, position: int, stratum: str, weight: float, n_turns: int, n_pairs: int
    ) -> SampledConversation:
        """The record of ``conversation``, drawn at ``position`` of its source into ``stratum``."""
        c = conversation
        return cls(
            conversation_id=c.id,
            source=c.source,
            record=c.record,
            position=position,
            stratum=stratum,
            weight=weight,
            n_messages=len(c.messages),
            n_turns=n_turns,
            n_pairs=n_pairs,
            metadata=c.metadata,
            messages=c.messages,
            tools=c.tools,
            calls=c.calls,
        )

    def conversation(self) -> Conversation:
        """The conversation as it was read from its source (what :meth:`of` kept of it)."""
        return Conversation(
            id=self.conversation_id,
            messages=self.messages,
            tools=self.tools,
            metadata=self.metadata,
            source=self.source,
            record=self.record,
            calls=self.calls,
        )


class Stratum(_Frozen):
    """One stratum of the sample: its key, population size, sample size and weight (``population / sampled``)."""

    stratum: str
    population: int
    sampled: int
    weight: float


class History(Sequence["Message"]):
    """The first ``stop`` messages of a conversation, without a copy: every replay point of a conversation shares its
    messages, so building the points of a 10,000-message conversation costs time and memory linear in its length.

    Example:
        >>> msgs = (Message(role="user", content="a"), Message(role="assistant", content="b"))
        >>> h = History(msgs, 1)
        >>> len(h), h[-1].content, h == msgs[:1]
        (1, 'a', True)
    """

    __slots__ = ("_messages", "_stop")

    def __init__(self, messages: tuple[Message, ...], stop: int) -> None:
        self._messages = messages
        self._stop = max(0, min(stop, len(messages)))

    def __len__(self) -> int:
        return self._stop

    @overload
    def __getitem__(self, index: int) -> Message: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[Message, ...]: ...
    def __getitem__(self, index: int | slice) -> Message | tuple[Message, ...]:
        if isinstance(index, slice):
            return self._messages[: self._stop][index]
        if not -self._stop <= index < self._stop:
            raise IndexError("history index out of range")
        return self._messages[index % self._stop]

    def __iter__(self) -> Iterator[Message]:
        return itertools.islice(self._messages, self._stop)

    def __reversed__(self) -> Iterator[Message]:
        return (self._messages[i] for i in range(self._stop - 1, -1, -1))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, History):
            return tuple(self) == tuple(other)
        return isinstance(other, tuple | list) and tuple(self) == tuple(other)

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"History({len(self)} messages)"


class ReplayPoint(_Frozen):
    """One assistant turn of a recorded conversation, ready to replay.

    ``context`` is every message before the turn, exactly as recorded (a :class:`History` sharing the
    conversation's messages when built by :func:`~delta_eval.replay.points.replay_points`); ``recorded`` is what
    production did in the turn, kept for reference and for tool simulation, and never put into a prompt.
    ``pair_id`` names the pair of replays made from this point (``"{conversation_id}#{turn_index}"``; with
    several epochs, ``"...@{epoch}"``). ``epoch`` numbers the repeats of a point (``RunConfig.epochs``), from 1.
    """

    pair_id: str
    conversation_id: str
    turn_index: int
    message_index: int
    epoch: int = 1
    context: Sequence[Message]
    recorded: TurnOutput
    tools: tuple[ToolSpec, ...] = ()
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("context", mode="after")
    @classmethod
    def _frozen_context(cls, value: Sequence[Message]) -> Sequence[Message]:
        return value if isinstance(value, tuple | History) else tuple(value)

    @field_serializer("context")
    def _context_items(self, value: Sequence[Message]) -> list[Message]:
        return list(value)


class Usage(_Frozen):
    """Token usage normalised across providers.

    ``input_tokens`` counts every prompt token: read from the provider's prompt cache (``cached_input_tokens``),
    written to it (``cache_write_tokens``, priced apart by some providers), and neither. ``output_tokens`` counts
    every generated token, reasoning included (``reasoning_tokens`` says how many). Nothing is counted twice.

    Example:
        >>> Usage(input_tokens=10, output_tokens=2) + Usage(input_tokens=5, cached_input_tokens=4)
        Usage(input_tokens=15, cached_input_tokens=4, cache_write_tokens=0, output_tokens=2, reasoning_tokens=0)
    """

    input_tokens: int = 0
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(**{name: getattr(self, name) + getattr(other, name) for name in _USAGE_FIELDS})

    def __repr__(self) -> str:
        return f"Usage({', '.join(f'{k}={v}' for k, v in self)})"


def total_usage(usages: Iterable[Usage | None]) -> Usage | None:
    """The sum of ``usages``, or ``None`` (unknown) when any of them is unknown (an empty set used nothing).

    ``None`` is what a provider that reported no usage leaves (a proxy that strips it): a total that includes it
    is unknown, never a partial sum, as :func:`delta_eval.pricing.total_cost` is for dollars.

    Example:
        >>> total_usage([Usage(input_tokens=3), Usage(input_tokens=4)]).input_tokens, total_usage([Usage(), None])
        (7, None)
    """
    # Summed field by field and built once (a run sums usage on every call; one Usage per addition cost more).
    sums = dict.fromkeys(_USAGE_FIELDS, 0)
    for u in usages:
        if u is None:
            return None
        for name in _USAGE_FIELDS:
            sums[name] += getattr(u, name)
    return Usage(**sums)


_USAGE_FIELDS = tuple(Usage.model_fields)


class Replay(_Frozen):
    """One side of a pair: a turn replayed with a variant (or, for ``side="recorded"``, the production turn).

    ``model`` is the model id asked for; ``served_model`` the one the provider says answered (the last call's);
    ``request_ids`` the provider's id of each call of the turn, in order; ``finished_at`` when the replay ended.
    ``usage`` (and so ``cost_usd``) is ``None`` when a call of the turn came back without usage: unknown, not 0.
    The deterministic checks (:mod:`delta_eval.replay.checks`): ``invalid_tool_calls`` (arguments that do not parse,
    an unknown tool, or arguments the tool's schema rejects) with ``tool_call_problems`` saying why;
    ``matches_recorded``, whether it did what production did here; ``text_instead_of_action``, whether it answered
    in text where production called a tool; ``no_decision``, whether it neither called a tool nor wrote any text (an
    empty reply, only reasoning, an empty Harmony parse): ``None`` for a replay that failed, and in runs written
    before the column existed (:func:`delta_eval.metrics.sides.no_decision_of` derives it there).
    ``recorded_acted`` says whether production called a tool at this point (the turns where text instead of action
    can happen): ``None`` on the recorded row itself and in runs written before the column existed, where the
    recorded rows tell (:func:`delta_eval.metrics.sides.recorded_acted_of`).
    """

    pair_id: str
    conversation_id: str
    turn_index: int
    epoch: int = 1
    side: Side
    variant: str
    model: str
    output: TurnOutput
    finish_reason: str
    provider_finish_reason: str | None = None
    hit_tool_cap: bool = False
    usage: Usage | None = Usage()
    cost_usd: float | None = None
    latency_ms: float = 0.0
    ttft_ms: float | None = None
    model_calls: int = 0
    cached_calls: int = 0
    served_model: str | None = None
    request_ids: tuple[str, ...] = ()
    finished_at: datetime | None = None
    invalid_tool_calls: int = 0
    tool_call_problems: tuple[str, ...] = ()
    matches_recorded: bool | None = None
    text_instead_of_action: bool = False
    no_decision: bool | None = None
    recorded_acted: bool | None = None
    error: str | None = None
    error_type: str | None = None


class Verdict(_Frozen):
    """The decision on one pair: which stage decided, what it decided, how sure, and why.

    ``outcome`` is ``equivalent`` when stage 1 or 2 found the outputs the same; ``candidate``, ``baseline`` or
    ``tie`` when the judge compared them; ``error`` when the pair could not be decided (the reason is in ``error``).

    Where a judge compared the outputs: ``preference`` is the probability that the candidate is the better one
    (0.5 for a tie; from the judge's confidence, both orders and a panel); ``severity`` is how bad the worse side's
    failure was; ``candidate_scores`` / ``baseline_scores`` are each side's scores on the rubric's dimensions (1-4);
    ``summary`` is the judge's one-paragraph account and ``reasoning`` its trace (the provider's reasoning summary
    where it gives one, else the judge's written rationale); ``prompt_hash`` names the version of the judge's prompt.
    ``audit_outcome`` is what stage 3 said of a pair stage 2 found equivalent, when it was drawn for the audit;
    ``orders_agree`` says, for a pair judged in both orders (by stage 3, or by its audit), whether every judge's
    two answers agreed. ``severity`` belongs to the side that lost the pair. For an ``error`` verdict,
    ``error_side`` says what failed: ``baseline``, ``candidate`` or ``both`` replays (the side that failed loses the
    pair in the win rate), or ``judge`` (no judge could decide). ``candidate`` names the candidate of the pair in a
    run of several candidates (``None`` in a run of one).
    """

    pair_id: str
    conversation_id: str
    turn_index: int
    epoch: int = 1
    stage: Stage
    outcome: Outcome
    confidence: float | None = None
    preference: float | None = None
    severity: Severity | None = None
    candidate_scores: dict[str, float] = Field(default_factory=dict)
    baseline_scores: dict[str, float] = Field(default_factory=dict)
    summary: str = ""
    reasoning: str = ""
    judge: str = ""
    prompt_hash: str = ""
    candidate_position: Literal["A", "B", "both"] | None = None
    audit_outcome: Outcome | None = None
    orders_agree: bool | None = None
    stratum: str = ""
    weight: float = 1.0
    judge_usage: Usage | None = Usage()
    judge_cost_usd: float | None = None
    judge_latency_ms: float = 0.0
    error: str | None = None
    error_side: Literal["baseline", "candidate", "both", "judge"] | None = None
    details: dict[str, Any] = Field(default_factory=dict)
    candidate: str | None = None


class Judgement(_Frozen):
    """One call of a stage-2 or stage-3 judge on a pair: a row of the run's ``judgements`` table.

    A pair judged in both orders, or by a panel, has one row per call, so what each call said is kept even where
    the verdict combines them. ``answer`` is what the judge said in its own terms (stage 2: ``equivalent``,
    ``different`` or ``unsure``; stage 3: ``A``, ``B`` or ``tie``; ``error`` when the call failed); ``outcome`` is
    that answer in the run's terms (``equivalent``, or ``candidate``, ``baseline``, ``tie``), given where the
    candidate was shown (``candidate_position``). ``raw`` is the judge's own record of its answer (for an LLM judge,
    the parsed JSON, or the text it could not parse). ``audit`` marks a stage-3 call on a pair stage 2 had already
    found equivalent (the audit of stage 2). ``answered_at`` is when the call's answer came back. The other fields
    are those of :class:`Verdict`, for this one call.
    """

    pair_id: str
    conversation_id: str
    turn_index: int
    stage: Literal["equivalence", "judge"]
    judge: str
    candidate_position: Literal["A", "B"]
    answer: str
    outcome: Outcome | None = None
    confidence: float | None = None
    preference: float | None = None
    severity: Severity | None = None
    candidate_scores: dict[str, float] = Field(default_factory=dict)
    baseline_scores: dict[str, float] = Field(default_factory=dict)
    summary: str = ""
    reasoning: str = ""
    prompt_hash: str = ""
    audit: bool = False
    raw: dict[str, Any] = Field(default_factory=dict)
    usage: Usage | None = Usage()
    cost_usd: float | None = None
    latency_ms: float = 0.0
    answered_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    error: str | None = None


class SimulatorCall(_Frozen):
    """One call of a session's user simulator or LLM tool simulator, made while rolling one side forward: a row of
    the run's ``simulator_calls`` table (their calls are not the sides' and are not in the replays' cost).

    ``purpose`` is what was asked (``goal``: the summary of the user's goal; ``reply``: the user's next message; a
    tool's name for the tool simulator). ``request_key`` identifies the request (its response-cache key): both sides
    of a session ask the same question while their transcripts are the same, and are answered by one call, so a
    run's simulator spend counts the answers of a key that did not come from the response cache (``cached``), or
    one when all did. The other fields are those of :class:`Judgement`, for this one call.
    """

    pair_id: str
    conversation_id: str
    turn_index: int
    epoch: int = 1
    side: Side
    role: SimulatorRole
    model: str
    purpose: str
    request_key: str
    cached: bool = False
    usage: Usage | None = Usage()
    cost_usd: float | None = None
    latency_ms: float = 0.0
    answered_at: datetime = Field(default_factory=lambda: datetime.now(UTC))


class ErrorRecord(_Frozen):
    """A row of the run's ``errors`` table: what failed, where, and why, so nothing is dropped silently.

    ``retryable`` is the provider's word on a failed call (``True``: the same request may succeed later, and the
    next run of the same command tries the pair again); ``None`` for errors that are not a provider's."""

    stage: ErrorStage
    message: str
    source: str = ""
    record: str = ""
    field: str = ""
    conversation_id: str | None = None
    pair_id: str | None = None
    error_type: str = ""
    attempts: int = 0
    retryable: bool | None = None
    at: datetime = Field(default_factory=lambda: datetime.now(UTC))

    @classmethod
    def from_exception(
        cls,
        exc: BaseException,
        stage: ErrorStage,
        *,
        message: str | None = None,
        source: str = "",
        record: str = "",
        field: str = "",
        conversation_id: str | None = None,
        pair_id: str | None = None,
    ) -> ErrorRecord:
        """The row for ``exc``. Where the exception knows its place (a record error's source, record and field; a
        provider error's attempts), that wins; the keyword arguments fill in what it does not know.

        Example:
            >>> from delta_eval.exceptions import RecordError
            >>> ErrorRecord.from_exception(RecordError("f.jsonl", "line 2", "messages", "bad"), "ingest").field
            'messages'
        """
        return cls(
            stage=stage,
            message=str(exc) if message is None else message,
            source=getattr(exc, "source", "") or source,
            record=getattr(exc, "record", "") or record,
            field=getattr(exc, "field", "") or field,
            conversation_id=conversation_id,
            pair_id=pair_id,
            error_type=type(exc).__name__,
            attempts=getattr(exc, "attempts", 0),
            retryable=retryable if isinstance(retryable := getattr(exc, "retryable", None), bool) else None,
        )
