"""``openai:`` models through the Chat Completions API: OpenAI itself and any OpenAI-compatible server (vLLM,
Ollama, a LiteLLM proxy) given as ``base_url``; Azure's deployments use the same adapter (:mod:`.azure`).

Wire format (``POST {base}/chat/completions``): earlier assistant tool calls go back as ``tool_calls`` with their
arguments exactly as the model wrote them, each answered by a ``tool`` message; the system prompt is a ``system``
message. Usage is normalised: ``prompt_tokens`` already includes cached tokens and ``completion_tokens`` reasoning
tokens, so they are taken as they are. With ``stream``, tool-call argument fragments are joined by index, usage
comes from the final chunk (``include_usage``; a server that ignores it leaves usage unknown, not 0), and a
stream that ends without a finish reason is a retryable failure, never a cached answer. A reply whose content is
raw Harmony (gpt-oss behind a server that does not parse it) is read by :mod:`.harmony` into reasoning, text and
tool calls.

Example (Python)::

    de.Variant(model="openai:gpt-4.1-mini")                                    # OPENAI_API_KEY from the env
    de.Variant(model="openai:Qwen2.5-7B-Instruct", provider_options={"base_url": "http://localhost:8000/v1"})
"""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping, Sequence
from typing import Any

import httpx2
import openai
import pydantic
import pydantic_core
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from delta_eval.adapters import harmony
from delta_eval.adapters.base import ClientShards, ModelAdapter, json_body, typed_body
from delta_eval.adapters.batch import BatchBackend
from delta_eval.adapters.errors import sdk_errors
from delta_eval.adapters.media import NO_BYTES, Note, placeholder, subtype, with_text
from delta_eval.adapters.openai_batch import OpenAIBatches
from delta_eval.adapters.openai_common import (
    REQUEST_OPTIONS,
    OpenAIOptions,
    make_client,
    map_openai_error,
    post_options,
    sampling,
)
from delta_eval.adapters.options import parse_options
from delta_eval.adapters.prompt_cache import prompt_cache_key
from delta_eval.adapters.registry import AdapterContext
from delta_eval.adapters.thinking import refused
from delta_eval.calls import FinishReason, ModelRequest, ModelResponse, ResponseFormat, ToolChoice, split_model_id
from delta_eval.exceptions import ProviderError, TransientError
from delta_eval.memo import IdentityMemo
from delta_eval.schema import MediaPart, Message, ReasoningState, ToolCall, ToolSpec, Usage

__all__ = [
    "ChatCompletionsAdapter",
    "body_json",
    "create",
    "decode_usage",
    "encode_media",
    "encode_message",
    "encode_messages",
]

_FINISH: dict[str, FinishReason] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "content_filter": "content_filter",
}


def encode_media(part: MediaPart, note: Note = None) -> dict[str, Any]:
    """One media part as a Chat Completions content part (a text part holding its placeholder where the API
    cannot take it; ``note`` is told why).

    Example:
        >>> encode_media(MediaPart.from_url("image", "https://example.com/a.png"))
        {'type': 'image_url', 'image_url': {'url': 'https://example.com/a.png'}}
    """
    if part.kind == "image" and (url := part.url or part.data_url) is not None:
        return {"type": "image_url", "image_url": {"url": url}}
    if part.kind == "audio" and part.data is not None and subtype(part) in ("wav", "mp3", "mpeg"):
        fmt = "wav" if subtype(part) == "wav" else "mp3"
        return {"type": "input_audio", "input_audio": {"data": part.data, "format": fmt}}
    if part.kind == "file" and (data_url := part.data_url) is not None:
        return {
            "type": "file",
            "file": {"file_data": data_url, "filename": part.filename or f"file-{part.sha256[:12]}"},
        }
    why = NO_BYTES if part.data is None and part.url is None else f"Chat Completions takes no such {part.kind} part"
    return {"type": "text", "text": placeholder(part, note, why)}


def encode_messages(messages: Sequence[Message], note: Note = None) -> list[dict[str, Any]]:
    """Canonical messages as Chat Completions messages (reasoning state is not part of this API: it is left out);
    ``note`` is told of media sent as placeholder text."""
    return [encode_message(m, note) for m in messages]


def encode_message(m: Message, note: Note = None) -> dict[str, Any]:
    """One canonical message as a Chat Completions message (see :func:`encode_messages`)."""
    if m.role == "assistant":
        message: dict[str, Any] = {"role": "assistant", "content": m.content}
        if m.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in m.tool_calls
            ]
        return message
    if m.role == "tool":
        why = "a Chat Completions tool result holds text only"
        content = with_text([placeholder(p, note, why) for p in m.media], m.content)
        return {"role": "tool", "tool_call_id": m.tool_call_id or "", "content": content}
    if m.media and m.role == "user":
        parts = [encode_media(p, note) for p in m.media]
        return {"role": "user", "content": [*parts, *([{"type": "text", "text": m.content}] if m.content else [])]}
    why = f"a Chat Completions {m.role} message holds text only"
    return {"role": m.role, "content": with_text([placeholder(p, note, why) for p in m.media], m.content)}


class _Encoded(list[dict[str, Any]]):
    """Encoded items (messages, tools) of a request body, each with its JSON where it is kept (``None``: not)."""

    __slots__ = ("parts",)

    def __init__(self, items: list[dict[str, Any]], parts: list[bytes | None]) -> None:
        super().__init__(items)
        self.parts = parts

    def json(self) -> bytes | None:
        """The JSON array of the items, from their kept JSON (``None``: an item's is not kept, or the list changed
        since it was encoded)."""
        parts = [part for part in self.parts if part is not None]
        if len(parts) != len(self) or len(self.parts) != len(self):
            return None
        return b"[" + b",".join(parts) + b"]"


def _kept_message(m: Message) -> tuple[dict[str, Any], bytes]:
    encoded = encode_message(m)
    return encoded, json_body(encoded)


def _kept_tools(tools: tuple[ToolSpec, ...]) -> _Encoded:
    encoded = encode_tools(tools)
    return _Encoded(encoded, [json_body(t) for t in encoded])


#: Each message's encoding and its JSON, by the identity of the message: a call of a replayed turn sends the
#: messages of the call before it and a few more, and encoding and serialising all of them again was the larger
#: part of building a request. Messages with media are encoded each time (their placeholders are noted). The kept
#: dicts are never changed.
_MESSAGES = IdentityMemo[tuple[dict[str, Any], bytes]](maxsize=1 << 14)


def _encode_kept(messages: Sequence[Message], note: Note) -> _Encoded:
    """:func:`encode_messages`, each message's JSON kept beside it (see :func:`body_json`)."""
    items: list[dict[str, Any]] = []
    parts: list[bytes | None] = []
    for m in messages:
        if m.media:
            items.append(encode_message(m, note))
            parts.append(None)
        else:
            encoded, data = _MESSAGES.get(m, _kept_message)
            items.append(encoded)
            parts.append(data)
    return _Encoded(items, parts)


#: Stand-ins for the kept arrays while the rest of a body is serialised; NUL characters keep them out of any text
#: a request carries (a body that holds one anyway is serialised whole).
_MARKS = tuple(f"\x00delta-eval-kept-{k}\x00" for k in range(4))
_STAND_INS = tuple(pydantic_core.to_json(mark) for mark in _MARKS)


def body_json(body: Mapping[str, Any]) -> bytes:
    """The JSON of a request body, as :func:`~delta_eval.adapters.base.json_body` writes it, byte for byte, with
    the messages and tools :meth:`ChatCompletionsAdapter.encode` made taken from their kept JSON."""
    kept = [key for key, value in body.items() if isinstance(value, _Encoded)]
    arrays = [array for key in kept if (array := body[key].json()) is not None]
    if not kept or len(kept) > len(_MARKS) or len(arrays) != len(kept):
        return json_body(body)
    marked = json_body({**body, **dict(zip(kept, _MARKS, strict=False))})  # each key keeps its place
    for stand_in, array in zip(_STAND_INS, arrays, strict=False):
        if marked.count(stand_in) != 1:
            return json_body(body)
        marked = marked.replace(stand_in, array)
    return marked


def encode_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """Tool specs in OpenAI's function format."""
    return [
        {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}
        for t in tools
    ]


#: The encoded tools of the requests seen lately and their JSON, by the identity of their tuple: every call of a
#: replayed turn sends the same tools, and encoding them is a fair share of encoding the request. Kept lists are
#: never changed.
_TOOLS = IdentityMemo[_Encoded](maxsize=256)


def encode_tool_choice(choice: ToolChoice) -> Any:
    """``auto`` / ``none`` / ``required``, or one named function."""
    return choice if isinstance(choice, str) else {"type": "function", "function": {"name": choice.name}}


def encode_response_format(fmt: ResponseFormat) -> dict[str, Any]:
    """A response format as Chat Completions takes it."""
    if fmt.type != "json_schema":
        return {"type": fmt.type}
    return {"type": "json_schema", "json_schema": {"name": fmt.name, "schema": fmt.json_schema, "strict": fmt.strict}}


def decode_usage(usage: Any) -> Usage | None:
    """Chat Completions usage, normalised: prompt tokens include cached ones, completion tokens reasoning ones.

    Example:
        >>> from openai.types import CompletionUsage
        >>> decode_usage(CompletionUsage.model_validate({"prompt_tokens": 95, "completion_tokens": 9,
        ...     "total_tokens": 104, "prompt_tokens_details": {"cached_tokens": 64},
        ...     "completion_tokens_details": {"reasoning_tokens": 4}}))
        Usage(input_tokens=95, cached_input_tokens=64, cache_write_tokens=0, output_tokens=9, reasoning_tokens=4)
    """
    if usage is None:  # reported none (a proxy may strip it): unknown, not 0
        return None
    prompt = getattr(usage, "prompt_tokens_details", None)
    completion = getattr(usage, "completion_tokens_details", None)
    return Usage(
        input_tokens=usage.prompt_tokens or 0,
        cached_input_tokens=(getattr(prompt, "cached_tokens", None) or 0) if prompt else 0,
        cache_write_tokens=(getattr(prompt, "cache_write_tokens", None) or 0) if prompt else 0,
        output_tokens=usage.completion_tokens or 0,
        reasoning_tokens=(getattr(completion, "reasoning_tokens", None) or 0) if completion else 0,
    )


@functools.cache
def _undeclared(cls: type, key: str) -> bool:
    """Whether a pydantic model class has no field nor attribute ``key``: its instances hold it in their extra
    fields or not at all (asking one for it anyway costs pydantic's ``__getattr__`` raising AttributeError)."""
    return issubclass(cls, pydantic.BaseModel) and key not in cls.model_fields and not hasattr(cls, key)


def _reasoning_text(message: Any) -> str | None:
    # OpenAI-compatible servers of reasoning models return the model's reasoning beside the answer, under one of
    # these names (vLLM, DeepSeek, LiteLLM); it is kept on the replay, never sent back.
    extra = getattr(message, "model_extra", None) or {}
    for key in ("reasoning_content", "reasoning"):
        value = extra.get(key) or (None if _undeclared(message.__class__, key) else getattr(message, key, None))
        if isinstance(value, str) and value:
            return value
    return None


class ChatCompletionsAdapter(ModelAdapter):
    """An OpenAI-compatible Chat Completions endpoint through the ``openai`` SDK's async client."""

    max_concurrency = 32

    def __init__(
        self, model: str, options: OpenAIOptions, clients: ClientShards[openai.AsyncOpenAI], *, wire_model: str
    ) -> None:
        super().__init__(model)
        self.options = options
        self.clients = clients
        self.client = clients.first
        self.wire_model = wire_model

    @property
    def budget_field(self) -> str:
        """How the output budget is sent: ``max_completion_tokens``, the field OpenAI takes for every model (its
        reasoning models refuse ``max_tokens``) and current OpenAI-compatible servers take too, unless the options
        name another (``max_tokens_field = "max_tokens"`` for an older server)."""
        return self.options.max_tokens_field or "max_completion_tokens"

    def cache_identity(self) -> dict[str, Any]:
        """The endpoint answering (a key never is)."""
        return {"base_url": str(self.client.base_url)}

    def encode(self, request: ModelRequest) -> dict[str, Any]:
        """The request body of ``POST /chat/completions`` for ``request`` (``params.extra`` merged in)."""
        p = request.params
        kwargs: dict[str, Any] = {"model": self.wire_model, "messages": _encode_kept(request.messages, self.note)}
        if request.tools:
            kwargs["tools"] = _TOOLS.get(request.tools, _kept_tools)
            if p.parallel_tool_calls is not None and self.info.parallel_tool_calls:
                kwargs["parallel_tool_calls"] = p.parallel_tool_calls
            elif p.parallel_tool_calls is not None:
                self.note(f"parallel_tool_calls dropped: {refused(self.info, 'parallel_tool_calls switch')}")
        if p.tool_choice is not None:
            kwargs["tool_choice"] = encode_tool_choice(p.tool_choice)
        kwargs.update(sampling(p, self.info, self.note, budget_field=self.budget_field))
        if p.seed is not None:
            kwargs["seed"] = p.seed
        if p.stop and self.info.stop:
            kwargs["stop"] = list(p.stop)
        elif p.stop:
            self.note(f"stop sequences dropped: {refused(self.info, 'stop sequences')}")
        if p.response_format is not None:
            kwargs["response_format"] = encode_response_format(p.response_format)
        key = prompt_cache_key(request.conversation_id) if self._sends_cache_key() else None
        if key is not None:
            kwargs["prompt_cache_key"] = key
        kwargs.update(p.extra)
        return kwargs

    def stream_body(self, body: dict[str, Any]) -> dict[str, Any]:
        """The body of a streamed call: ``body`` asking for a stream whose last chunk carries the usage."""
        return {**body, "stream": True, "stream_options": {"include_usage": True}}

    def _sends_cache_key(self) -> bool:
        # OpenAI itself takes the key; an unknown server or an Azure api-version may refuse it unless asked.
        chosen = self.options.prompt_cache_key
        return chosen if chosen is not None else self.options.base_url is None and type(self.options) is OpenAIOptions

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """One call: streamed when ``params.stream`` is set."""
        body = self.encode(request)
        with sdk_errors(openai.OpenAIError, self._mapped, model=self.model, secrets=self.options.secrets):
            if request.params.stream:
                return await self._stream(body)
            # The raw response, read into its type here (typed_body: one pass in pydantic-core, not the SDK's walk);
            # the SDK's request() with the options its post() would make (post_options: copied, not made anew).
            response = await self.clients.next().request(
                httpx2.Response, post_options("/chat/completions", body_json(body))
            )
            completion = typed_body(ChatCompletion, response.content, model=self.model)
        return self.decode(completion, request_id=response.headers.get("x-request-id"))

    def _mapped(self, exc: openai.OpenAIError) -> ProviderError:
        return map_openai_error(exc, model=self.model, secrets=self.options.secrets())

    def decode(self, completion: ChatCompletion, *, request_id: str | None) -> ModelResponse:
        """The canonical response of a Chat Completion (also what a batch's output line holds)."""
        if not completion.choices:
            raise TransientError("the response holds no choices", model=self.model)
        choice = completion.choices[0]
        message = choice.message
        calls = tuple(
            ToolCall(id=c.id, name=c.function.name, arguments=c.function.arguments or "")
            for c in message.tool_calls or ()
            if c.type == "function"
        )
        return self._response(
            text=message.content if message.content is not None else message.refusal,
            calls=calls,
            reasoning=_reasoning_text(message),
            finish=choice.finish_reason,
            usage=completion.usage,
            served=completion.model,
            request_id=request_id,
        )

    async def _stream(self, kwargs: dict[str, Any]) -> ModelResponse:
        start = time.perf_counter()
        ttft: float | None = None
        text: list[str] = []
        reasoning: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        finish: str | None = None
        usage: Any = None
        served = ""
        stream = await self.clients.next().post(
            "/chat/completions",
            content=body_json(self.stream_body(kwargs)),
            cast_to=ChatCompletion,
            options=REQUEST_OPTIONS,
            stream=True,
            stream_cls=openai.AsyncStream[ChatCompletionChunk],
        )
        request_id = stream.response.headers.get("x-request-id")
        async for chunk in stream:
            served = chunk.model or served
            if chunk.usage is not None:
                usage = chunk.usage
            for choice in chunk.choices:  # Azure's first chunk may carry no choice at all
                delta = choice.delta
                piece = delta.content or delta.refusal
                thought = _reasoning_text(delta)
                if ttft is None and (piece or delta.tool_calls or thought):
                    ttft = (time.perf_counter() - start) * 1000
                if piece:
                    text.append(piece)
                if thought:
                    reasoning.append(thought)
                for call in delta.tool_calls or ():
                    slot = calls.setdefault(call.index, {"id": "", "name": "", "arguments": []})
                    if call.id:
                        slot["id"] = call.id
                    if call.function is not None:
                        slot["name"] += call.function.name or ""
                        slot["arguments"].append(call.function.arguments or "")
                finish = choice.finish_reason or finish
        if finish is None:
            # The stream ended before the model said it was done: a partial answer, never to be cached.
            raise TransientError("the stream ended before its last event", model=self.model)
        return self._response(
            text="".join(text) if text else None,
            calls=tuple(
                ToolCall(id=c["id"], name=c["name"], arguments="".join(c["arguments"]))
                for _, c in sorted(calls.items())
            ),
            reasoning="".join(reasoning) or None,
            finish=finish,
            usage=usage,
            served=served,
            request_id=request_id,
            ttft_ms=ttft,
        )

    def _response(
        self,
        *,
        text: str | None,
        calls: tuple[ToolCall, ...],
        reasoning: str | None,
        finish: str | None,
        usage: Any,
        served: str,
        request_id: str | None,
        ttft_ms: float | None = None,
    ) -> ModelResponse:
        canonical = _FINISH.get(finish or "", "other")
        if harmony.has_markers(text):
            # gpt-oss behind a server that returns raw Harmony: its channels and calls are all in the text.
            parsed = harmony.parse(text or "")
            text, calls = parsed.text, calls + parsed.calls
            reasoning = "\n".join(r for r in (reasoning, parsed.reasoning) if r) or None
            canonical = "tool_calls" if parsed.calls and canonical == "stop" else canonical
        if usage is None:
            self.note("the server reported no token usage (it may ignore stream_options.include_usage); "
                      "tokens and cost of those calls are unknown")  # fmt: skip
        state = ReasoningState(provider="openai", model=self.wire_model, summary=reasoning) if reasoning else None
        return ModelResponse(
            message=Message(role="assistant", content=text, tool_calls=calls, reasoning=state),
            finish_reason=canonical,
            provider_finish_reason=finish,
            usage=decode_usage(usage),
            ttft_ms=ttft_ms,
            served_model=served,
            request_id=request_id,
        )

    def batch_backend(self) -> BatchBackend | None:
        """OpenAI's Batch API (:mod:`.openai_batch`); an Azure deployment's batches are not wired in."""
        return OpenAIBatches(self) if type(self.options) is OpenAIOptions else None

    async def aclose(self) -> None:
        """Close the SDK client's connections."""
        for client in self.clients.clients:
            await client.close()


def create(model: str, options: Mapping[str, Any], context: AdapterContext) -> ChatCompletionsAdapter:
    """The factory of ``openai:`` model ids."""
    opts = parse_options(OpenAIOptions, model, options)
    name = split_model_id(model)[1]
    clients = ClientShards(lambda: make_client(opts, model), opts.connection_pools)
    return ChatCompletionsAdapter(model, opts, clients, wire_model=name)
