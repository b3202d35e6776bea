"""``anthropic:`` models through the Messages API (``POST {base}/v1/messages``) and the ``anthropic`` SDK.

Wire format: the system prompt is the top-level ``system``; an assistant turn is a list of blocks (``thinking``,
``text``, ``tool_use`` with its arguments as an object); tool results are ``tool_result`` blocks at the start of
the next user message, consecutive results merged into one user turn. A thinking model's signed ``thinking``
blocks must come back unmodified with the ``tool_use`` they preceded: the assistant message keeps its blocks,
exactly as they arrived, in its :class:`~delta_eval.schema.ReasoningState`, and they are sent back verbatim to the
same model (and dropped for any other).

Media go as blocks before the text of their user message or tool result: an image in JPEG, PNG, GIF or WebP as an
``image`` block with a ``base64`` or ``url`` source; a PDF as a ``document`` (``base64`` or ``url``), a plain-text
file as a ``document`` with a ``text`` source. What the Messages API cannot take (audio, other file types, a
document in a tool result) goes as its placeholder text, said once in the notes.

Rules said once per run instead of a 400 on every call: ``max_tokens`` is required (a default is sent when a
variant gives none) and must exceed a thinking budget; reasoning parameters become what the model generation takes
(from the model catalogue: a ``budget_tokens`` for Claude 4.5 and older, adaptive thinking with an ``effort`` for
Opus 4.7 / Sonnet 5 and later, either for 4.6); ``temperature`` and ``top_p`` are sent only under an API version
that takes them (not 2026-10-21, the current SDK's), to models that take them, never with thinking on, and not both
at once; there is no ``seed``; with thinking on, only ``auto`` or
``none`` tool choice is allowed.

Usage is normalised: Anthropic's ``input_tokens`` counts only uncached input, so input = input + cache reads +
cache writes, cached = cache reads, cache writes kept apart (priced apart).

Example (Python)::

    de.Variant(model="anthropic:claude-sonnet-4-6", params={"max_tokens": 2048, "reasoning_budget": 1024})
    de.Variant(model="anthropic:claude-opus-4-8", params={"reasoning_effort": "high"})
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any, cast

import anthropic
import httpx2
from anthropic._types import RequestOptions
from anthropic.lib.streaming import AsyncMessageStreamManager
from anthropic.types import Message as AnthropicMessage
from anthropic.types import MessageDeltaUsage, RawMessageStreamEvent
from anthropic.types import Usage as WireUsage

from delta_eval.adapters.anthropic_batch import AnthropicBatches
from delta_eval.adapters.base import (
    JSON_HEADERS,
    ClientShards,
    ModelAdapter,
    json_body,
    sdk_client_options,
    typed_body,
)
from delta_eval.adapters.batch import BatchBackend
from delta_eval.adapters.errors import connection_error, sdk_errors, status_error
from delta_eval.adapters.media import NO_BYTES, Note, decoded, placeholder
from delta_eval.adapters.options import ProviderOptions, parse_options
from delta_eval.adapters.prompt_cache import CacheTTL, add_cache_breakpoints
from delta_eval.adapters.registry import AdapterContext
from delta_eval.adapters.thinking import budget_for_effort, clamp_budget, refused, resolve_effort, wanted_effort
from delta_eval.calls import FinishReason, GenerateParams, ModelRequest, ModelResponse, split_model_id
from delta_eval.exceptions import ProviderError, TransientError
from delta_eval.schema import MediaPart, Message, ReasoningState, ToolCall, Usage

__all__ = [
    "PROVIDER",
    "AnthropicAdapter",
    "AnthropicOptions",
    "create",
    "decode_usage",
    "encode_media",
    "encode_messages",
]

PROVIDER = "anthropic"
#: ``client.post()`` with a pre-encoded body: the typed ``messages.create()`` first walks the whole body against its
#: parameter types, milliseconds of CPU per call on agent-sized contexts for no change to plain JSON.
_OPTIONS: RequestOptions = {"headers": JSON_HEADERS}
_STOP: dict[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}


class AnthropicOptions(ProviderOptions):
    """Options of ``anthropic:`` models (and those of :class:`~delta_eval.adapters.options.ProviderOptions`).

    ``default_max_tokens`` is sent when a variant sets no ``max_tokens`` (Anthropic requires one).
    ``prompt_cache`` marks each request's tools, system prompt and history for Anthropic's prompt cache (see
    :mod:`delta_eval.adapters.prompt_cache`), whose entries live ``cache_ttl``.
    """

    default_max_tokens: int = 8192
    prompt_cache: bool = True
    cache_ttl: CacheTTL = "5m"


def _arguments(call: ToolCall) -> dict[str, Any]:
    parsed = call.parsed_arguments
    return parsed if isinstance(parsed, dict) else {}


#: The image types the Messages API takes.
_IMAGE_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")


def encode_media(part: MediaPart, note: Note = None, *, in_tool_result: bool = False) -> dict[str, Any]:
    """One media part as a Messages content block (a text block holding its placeholder where the API cannot take
    it; ``note`` is told why). A tool result takes images only.

    Example:
        >>> encode_media(MediaPart.from_url("image", "https://example.com/a.png", "image/png"))
        {'type': 'image', 'source': {'type': 'url', 'url': 'https://example.com/a.png'}}
    """
    source: dict[str, Any] | None = None
    if part.kind == "image" and (part.url is not None or part.media_type in _IMAGE_TYPES):
        source = _source(part)
        block_type = "image"
    elif part.kind == "file" and not in_tool_result:
        block_type = "document"
        if part.media_type == "application/pdf" or (part.url is not None and not part.media_type):
            source = _source(part)
        elif part.media_type.startswith("text/plain") and part.data is not None:
            text = decoded(part).decode("utf-8", errors="replace")
            source = {"type": "text", "media_type": "text/plain", "data": text}
    if source is not None:
        return {"type": block_type, "source": source}
    if part.data is None and part.url is None:
        why = NO_BYTES
    elif in_tool_result and part.kind != "audio":
        why = "a Messages tool result takes images only"
    else:
        why = f"the Messages API takes no {part.media_type or part.kind} {part.kind} part"
    return {"type": "text", "text": placeholder(part, note, why)}


def _source(part: MediaPart) -> dict[str, Any] | None:
    if part.data is not None:
        return {"type": "base64", "media_type": part.media_type, "data": part.data}
    if part.url is not None:
        return {"type": "url", "url": part.url}
    return None


def encode_messages(
    messages: Sequence[Message], wire_model: str, note: Note = None
) -> tuple[str | None, list[dict[str, Any]]]:
    """The ``system`` prompt and the ``messages`` for canonical messages; ``note`` is told of media sent as
    placeholder text."""
    system = [m.content or "" for m in messages if m.role == "system"]
    out: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        # Consecutive turns of one role are one turn: tool results first, then any text.
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})

    for m in messages:
        if m.role == "system":
            continue
        if m.role == "assistant":
            state = m.reasoning
            if state is not None and state.provider == PROVIDER and state.model == wire_model:
                add("assistant", [dict(b) for b in (state.data or {}).get("content", [])])
                continue
            blocks: list[dict[str, Any]] = [{"type": "text", "text": m.content}] if m.content else []
            blocks += [{"type": "tool_use", "id": c.id, "name": c.name, "input": _arguments(c)} for c in m.tool_calls]
            add("assistant", blocks)
        elif m.role == "tool":
            content: str | list[dict[str, Any]] = m.content or ""
            if m.media:
                content = [encode_media(p, note, in_tool_result=True) for p in m.media]
                content += [{"type": "text", "text": m.content}] if m.content else []
            add("user", [{"type": "tool_result", "tool_use_id": m.tool_call_id or "", "content": content}])
        elif m.media:
            media = [encode_media(p, note) for p in m.media]
            add("user", [*media, *([{"type": "text", "text": m.content}] if m.content else [])])
        else:
            add("user", [{"type": "text", "text": m.content or ""}])
    return ("\n\n".join(system) if system else None), out


def decode_usage(usage: Any) -> Usage | None:
    """Anthropic usage, normalised (its ``input_tokens`` are only the uncached ones).

    Example:
        >>> from anthropic.types import Usage as Wire
        >>> decode_usage(Wire.model_validate({"input_tokens": 380, "output_tokens": 54,
        ...     "cache_creation_input_tokens": 100, "cache_read_input_tokens": 2000}))
        Usage(input_tokens=2480, cached_input_tokens=2000, cache_write_tokens=100, output_tokens=54, reasoning_tokens=0)
    """
    if usage is None:  # reported none (a proxy may strip it): unknown, not 0
        return None
    read = usage.cache_read_input_tokens or 0
    write = usage.cache_creation_input_tokens or 0
    details = getattr(usage, "output_tokens_details", None)
    return Usage(
        input_tokens=(usage.input_tokens or 0) + read + write,
        cached_input_tokens=read,
        cache_write_tokens=write,
        output_tokens=usage.output_tokens or 0,
        reasoning_tokens=(getattr(details, "thinking_tokens", None) or 0) if details else 0,
    )


class _UsageGuard:
    """The raw event stream, with usage the server left out stood in for, and said: the SDK's accumulator reads
    ``usage`` on ``message_start`` and ``message_delta`` unconditionally (a proxy may strip it), and the answer
    must still come through, its usage unknown rather than a crash or a made-up zero."""

    def __init__(self, raw: Any) -> None:
        self._raw = raw
        self._stream: Any = None
        self.usage_missing = False
        self.response: Any = None

    async def open(self) -> _UsageGuard:
        self._stream = await self._raw
        self.response = self._stream.response
        return self

    async def __aiter__(self) -> Any:
        async for event in self._stream:
            if event.type == "message_start" and event.message.usage is None:
                self.usage_missing = True
                event.message.usage = WireUsage(input_tokens=0, output_tokens=0)
            elif event.type == "message_delta" and getattr(event, "usage", None) is None:
                self.usage_missing = True
                event.usage = MessageDeltaUsage(output_tokens=0)
            yield event

    async def close(self) -> None:
        if self._stream is not None:
            await self._stream.close()


class AnthropicAdapter(ModelAdapter):
    """Claude models through the ``anthropic`` SDK's async client."""

    max_concurrency = 16

    def __init__(self, model: str, options: AnthropicOptions, clients: ClientShards[anthropic.AsyncAnthropic]) -> None:
        super().__init__(model)
        self.options = options
        self.clients = clients
        self.client = clients.first
        self.wire_model = split_model_id(model)[1]

    def cache_identity(self) -> dict[str, Any]:
        """The endpoint answering (a key never is)."""
        return {"base_url": str(self.client.base_url)}

    def batch_backend(self) -> BatchBackend | None:
        """Anthropic's Message Batches API (:mod:`.anthropic_batch`); Bedrock's and Vertex AI's batches are not
        wired in."""
        return AnthropicBatches(self) if type(self) is AnthropicAdapter else None

    def _thinking(self, p: GenerateParams) -> tuple[dict[str, Any] | None, dict[str, Any]]:
        """The ``thinking`` setting and ``output_config`` for the reasoning parameters, as this model takes them:
        adaptive thinking with an effort (Opus 4.6 and later), a token budget (``enabled``; Claude 4.5 and older,
        and 4.6 still), or nothing for a model that does not think."""
        info = self.info
        wanted_budget = p.reasoning_budget
        effort = p.reasoning_effort
        if wanted_budget is None and effort is None:
            return None, {}
        if wanted_budget == 0 or (wanted_budget is None and effort == "none"):
            if not info.reasoning:
                return None, {}
            if info.thinking_off and info.budget:
                return {"type": "disabled"}, {}  # the generations of enabled/disabled thinking
            if info.thinking_off and not info.thinking_default:
                return None, {}  # adaptive-only models think only when asked: asking nothing keeps it off
            self.note(f"thinking stays on at the lowest effort: {info.model} cannot be told to turn it off")
            effort, wanted_budget = (info.efforts[0] if info.efforts else None), None
            if effort is None:
                return None, {}
        if not info.reasoning:
            self.note(f"reasoning parameters dropped: {refused(info, 'thinking configuration')}")
            return None, {}
        if wanted_budget is not None and info.budget:
            return {"type": "enabled", "budget_tokens": clamp_budget(wanted_budget, info, self.note)}, {}
        if info.adaptive:
            wanted = effort if effort is not None else wanted_effort(p, self.note)
            level = resolve_effort(wanted, info, self.note) if wanted is not None and info.efforts else None
            return {"type": "adaptive"}, ({"effort": level} if level is not None else {})
        if info.budget:
            budget = budget_for_effort(effort or "medium")
            self.note(f"reasoning effort {effort!r} sent as a thinking budget of {budget} tokens ({info.model} "
                      "takes a budget, not an effort)")  # fmt: skip
            return {"type": "enabled", "budget_tokens": clamp_budget(budget, info, self.note)}, {}
        self.note(f"reasoning parameters dropped: {refused(info, 'thinking configuration')}")
        return None, {}

    def _sampling(self, p: GenerateParams, thinking: dict[str, Any] | None) -> dict[str, Any]:
        """``temperature`` / ``top_p`` where the model takes them: not with thinking on, and not both at once."""
        given = {name: getattr(p, name) for name in ("temperature", "top_p") if getattr(p, name) is not None}
        if p.seed is not None:
            self.note("seed dropped: Anthropic takes none")
        if not given:
            return {}
        thinks = thinking is not None and thinking.get("type") != "disabled"
        version = str(self.client.default_headers.get("anthropic-version", ""))
        if version >= "2026-10-21":
            # The API version the SDK speaks refuses them on every model, even at their defaults.
            self.note(f"{', '.join(given)} dropped: Anthropic's API version {version} takes no sampling parameters")
            return {}
        if not self.info.sampling:
            self.note(f"{', '.join(given)} dropped: {refused(self.info, 'sampling parameters (temperature, top_p)')}")
            return {}
        if thinks:
            self.note(f"{', '.join(given)} dropped: Anthropic takes no sampling parameters with thinking on")
            return {}
        if len(given) == 2:
            # Claude 4.5 and later take one of the two; temperature is the one a variant usually means.
            self.note("top_p dropped: Anthropic takes temperature or top_p, not both")
            del given["top_p"]
        return given

    def encode(self, request: ModelRequest) -> dict[str, Any]:
        """The request body of ``POST /v1/messages`` for ``request`` (``params.extra`` merged in)."""
        p = request.params
        system, messages = encode_messages(request.messages, self.wire_model, self.note)
        thinking, output_config = self._thinking(p)
        max_tokens = p.max_tokens
        if max_tokens is None:
            max_tokens = self.options.default_max_tokens
            self.note(f"max_tokens not set; Anthropic requires one: {max_tokens} sent")
        budget = (thinking or {}).get("budget_tokens")
        if budget is not None and max_tokens <= budget:
            max_tokens = budget + self.options.default_max_tokens
            self.note(f"max_tokens raised to {max_tokens}: it must exceed the thinking budget of {budget}")
        kwargs: dict[str, Any] = {"model": self.wire_model, "max_tokens": max_tokens, "messages": messages}
        if system is not None:
            kwargs["system"] = system
        if request.tools:
            kwargs["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters} for t in request.tools
            ]
        choice = self._tool_choice(p, thinking)
        if choice is not None:
            kwargs["tool_choice"] = choice
        if thinking is not None:
            kwargs["thinking"] = thinking
        kwargs.update(self._sampling(p, thinking))
        if p.stop:
            kwargs["stop_sequences"] = list(p.stop)
        if p.response_format is not None and p.response_format.type == "json_schema":
            output_config["format"] = {"type": "json_schema", "schema": p.response_format.json_schema}
        elif p.response_format is not None and p.response_format.type == "json_object":
            self.note("response_format json_object dropped: Anthropic takes only a JSON schema")
        if output_config:
            kwargs["output_config"] = output_config
        kwargs.update(p.extra)
        if self.options.prompt_cache:
            add_cache_breakpoints(kwargs, self.options.cache_ttl)
        return kwargs

    def _tool_choice(self, p: GenerateParams, thinking: dict[str, Any] | None) -> dict[str, Any] | None:
        choice = p.tool_choice
        if choice is None and p.parallel_tool_calls is None:
            return None
        thinks = thinking is not None and thinking.get("type") != "disabled"
        if thinks and choice is not None and choice not in ("auto", "none"):
            self.note(f"tool_choice {choice!r} dropped: with thinking on, Anthropic allows only auto or none")
            choice = None
        out: dict[str, Any]
        if choice is None or choice == "auto":
            out = {"type": "auto"}
        elif choice == "none":
            out = {"type": "none"}
        elif choice == "required":
            out = {"type": "any"}
        else:
            out = {"type": "tool", "name": choice.name}
        if p.parallel_tool_calls is False and out["type"] != "none":
            out["disable_parallel_tool_use"] = True
        return out

    def post_body(self, body: dict[str, Any]) -> dict[str, Any]:
        """The body arguments of ``client.post("/v1/messages", ...)``: JSON encoded here. The Vertex AI and Bedrock
        clients rewrite the path and body of a dict body only, so their adapters pass ``body=`` instead."""
        return {"content": json_body(body)}

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """One call: streamed when ``params.stream`` is set."""
        kwargs = self.encode(request)
        start = time.perf_counter()
        ttft: float | None = None
        message: AnthropicMessage
        with sdk_errors(anthropic.AnthropicError, self._error, model=self.model, secrets=self.options.secrets):
            if request.params.stream:
                # The SDK's own stream accumulator, around the same call the typed method makes.
                raw = self.clients.next().post(
                    "/v1/messages",
                    **self.post_body({**kwargs, "stream": True}),
                    cast_to=AnthropicMessage,
                    options=_OPTIONS,
                    stream=True,
                    stream_cls=anthropic.AsyncStream[RawMessageStreamEvent],
                )
                events = _UsageGuard(raw)
                # The manager reads only `response`, iteration and `close()` of the stream it is given.
                async with AsyncMessageStreamManager(cast(Any, events.open())) as stream:
                    async for event in stream:
                        if ttft is None and event.type == "content_block_delta":
                            ttft = (time.perf_counter() - start) * 1000
                    message = await stream.get_final_message()
                request_id = stream.response.headers.get("request-id")
                if message.stop_reason is None:
                    raise TransientError("the stream ended before its last event", model=self.model)
                if events.usage_missing:
                    message = message.model_copy(update={"usage": None})
            else:
                response = await self.clients.next().post(
                    "/v1/messages", **self.post_body(kwargs), cast_to=httpx2.Response, options=_OPTIONS
                )
                message = typed_body(AnthropicMessage, response.content, model=self.model)
                request_id = response.headers.get("request-id")
        return self.decode(message, request_id=request_id, ttft_ms=ttft)

    def _error(self, exc: anthropic.AnthropicError) -> ProviderError:
        secrets = self.options.secrets()
        if isinstance(exc, anthropic.APIStatusError):
            body = exc.body if isinstance(exc.body, dict) else {}
            error: dict[str, Any] = body.get("error") or {} if isinstance(body.get("error"), dict) else {}
            kind = str(error.get("type") or "") or None
            message = str(error.get("message") or exc.message)
            if exc.request_id:
                message += f" (request id {exc.request_id})"
            if exc.status_code < 400:  # an error event inside a 200 stream (overloaded mid-answer)
                return TransientError(f"error inside the stream: {kind}: {message}", model=self.model)
            headers = dict(exc.response.headers)
            return status_error(exc.status_code, message, model=self.model, headers=headers, code=kind, secrets=secrets)
        if isinstance(exc, anthropic.APIConnectionError):
            return connection_error(exc, model=self.model, secrets=secrets)
        return TransientError(f"{type(exc).__name__}: {exc}", model=self.model)

    def decode(self, message: Any, *, request_id: str | None, ttft_ms: float | None = None) -> ModelResponse:
        """The canonical response of an Anthropic ``Message``."""
        blocks = [block.model_dump(exclude_none=True) for block in message.content]
        texts = [b["text"] for b in blocks if b["type"] == "text"]
        calls = tuple(
            ToolCall(id=b["id"], name=b["name"], arguments=_json(b.get("input", {})))
            for b in blocks
            if b["type"] == "tool_use"
        )
        thoughts = [b.get("thinking", "") for b in blocks if b["type"] == "thinking"]
        state = None
        if any(b["type"] in ("thinking", "redacted_thinking") for b in blocks):
            # The whole turn, exactly as it came: thinking blocks go back unmodified and in their place.
            kept = [{k: v for k, v in b.items() if k != "citations"} for b in blocks]
            state = ReasoningState(
                provider=PROVIDER,
                model=self.wire_model,
                data={"content": kept},
                summary="\n".join(t for t in thoughts if t) or None,
            )
        stop = message.stop_reason
        return ModelResponse(
            message=Message(
                role="assistant", content="".join(texts) if texts else None, tool_calls=calls, reasoning=state
            ),
            finish_reason=_STOP.get(stop or "", "other"),
            provider_finish_reason=stop,
            usage=decode_usage(message.usage),
            ttft_ms=ttft_ms,
            served_model=message.model or "",
            request_id=request_id,
        )

    async def aclose(self) -> None:
        """Close the SDK client's connections."""
        for client in self.clients.clients:
            await client.close()


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def create(model: str, options: Mapping[str, Any], context: AdapterContext) -> AnthropicAdapter:
    """The factory of ``anthropic:`` model ids."""
    opts = parse_options(AnthropicOptions, model, options)
    key = opts.key("ANTHROPIC_API_KEY", model=model)

    def client() -> anthropic.AsyncAnthropic:
        return anthropic.AsyncAnthropic(
            api_key=key,
            base_url=opts.base_url,
            **sdk_client_options(opts, anthropic),
        )

    return AnthropicAdapter(model, opts, ClientShards(client, opts.connection_pools))
