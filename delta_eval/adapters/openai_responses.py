"""``openai-responses:`` models through OpenAI's Responses API (``POST {base}/responses``), and Azure's
(:mod:`.azure`).

Context is managed here, not on OpenAI's side (``store`` off): the system prompt goes in ``instructions``; earlier
assistant tool calls go back as ``function_call`` items with their ``call_id``, each answered by a
``function_call_output``. A reasoning model's ``reasoning`` items (with ``encrypted_content``, asked for through
``include``) travel with the assistant message they came with, in its
:class:`~delta_eval.schema.ReasoningState`, and go back unchanged before that message's function calls, which is
what lets a thinking model continue its turn across tool rounds; their summaries are kept on the replay.

Media of a user message go as content parts before its ``input_text``: an image as ``input_image`` (its URL or a
``data:`` URL of its bytes), a file as ``input_file`` (``file_data`` with its filename, or ``file_url``); audio, and
media of a tool result (its output is sent as text), go as their placeholder text, said once in the notes.

A stream is timed to its first generated delta and decoded from its ``response.completed`` event; a stream that ends
without one is a retryable failure.

Example (Python)::

    de.Variant(model="openai-responses:o4-mini", params={"reasoning_effort": "low"})
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import httpx2
import openai
from openai.types.responses import Response, ResponseStreamEvent

from delta_eval.adapters.base import ClientShards, ModelAdapter, json_body, typed_body
from delta_eval.adapters.errors import sdk_errors
from delta_eval.adapters.media import NO_BYTES, Note, placeholder, with_text
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
from delta_eval.exceptions import BadRequestError, ProviderError, TransientError
from delta_eval.schema import MediaPart, Message, ReasoningState, ToolCall, ToolSpec, Usage

__all__ = ["PROVIDER", "ResponsesAdapter", "create", "decode_usage", "encode_input", "encode_media"]

#: The provider name on reasoning state this adapter writes and reads back.
PROVIDER = "openai-responses"

_INCOMPLETE: dict[str, FinishReason] = {"max_output_tokens": "length", "content_filter": "content_filter"}
_DELTAS = (
    "response.output_text.delta",
    "response.refusal.delta",
    "response.function_call_arguments.delta",
    "response.reasoning_summary_text.delta",
    "response.reasoning_text.delta",
)


def encode_media(part: MediaPart, note: Note = None) -> dict[str, Any]:
    """One media part as a Responses content part (an ``input_text`` holding its placeholder where the API cannot
    take it; ``note`` is told why).

    Example:
        >>> encode_media(MediaPart.from_url("image", "https://example.com/a.png"))
        {'type': 'input_image', 'image_url': 'https://example.com/a.png', 'detail': 'auto'}
    """
    if part.kind == "image" and (url := part.url or part.data_url) is not None:
        return {"type": "input_image", "image_url": url, "detail": "auto"}
    if part.kind == "file" and (data_url := part.data_url) is not None:
        return {"type": "input_file", "file_data": data_url, "filename": part.filename or f"file-{part.sha256[:12]}"}
    if part.kind == "file" and part.url is not None:
        return {"type": "input_file", "file_url": part.url}
    why = NO_BYTES if part.data is None and part.url is None else f"the Responses API takes no such {part.kind} part"
    return {"type": "input_text", "text": placeholder(part, note, why)}


def encode_input(
    messages: Sequence[Message], wire_model: str, note: Note = None
) -> tuple[str | None, list[dict[str, Any]]]:
    """The ``instructions`` and ``input`` items for canonical messages.

    The first message, when it is the system prompt, becomes the instructions. Reasoning items are sent back only
    to the model that produced them. ``note`` is told of media sent as placeholder text.
    """
    instructions: str | None = None
    if messages and messages[0].role == "system":
        instructions, messages = messages[0].content or "", messages[1:]
    items: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "assistant":
            state = m.reasoning
            if state is not None and state.provider == PROVIDER and state.model == wire_model:
                items.extend(state.data.get("items", []) if isinstance(state.data, dict) else [])
            if m.content:
                items.append({"role": "assistant", "content": m.content})
            items.extend(
                {"type": "function_call", "call_id": c.id, "name": c.name, "arguments": c.arguments}
                for c in m.tool_calls
            )
        elif m.role == "tool":
            why = "a function_call_output is sent as text"
            output = with_text([placeholder(p, note, why) for p in m.media], m.content)
            items.append({"type": "function_call_output", "call_id": m.tool_call_id or "", "output": output})
        elif m.media and m.role == "user":
            text = [{"type": "input_text", "text": m.content}] if m.content else []
            items.append({"role": "user", "content": [*(encode_media(p, note) for p in m.media), *text]})
        else:
            why = f"a Responses {m.role} message is sent as text"
            items.append(
                {"role": m.role, "content": with_text([placeholder(p, note, why) for p in m.media], m.content)}
            )
    return instructions, items


def encode_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """Tool specs in the Responses API's flat function shape."""
    return [
        {"type": "function", "name": t.name, "description": t.description, "parameters": t.parameters, "strict": False}
        for t in tools
    ]


def encode_tool_choice(choice: ToolChoice) -> Any:
    """``auto`` / ``none`` / ``required``, or one named function."""
    return choice if isinstance(choice, str) else {"type": "function", "name": choice.name}


def encode_text_format(fmt: ResponseFormat) -> dict[str, Any]:
    """A response format as the ``text.format`` of the Responses API."""
    if fmt.type != "json_schema":
        return {"type": fmt.type}
    return {"type": "json_schema", "name": fmt.name, "schema": fmt.json_schema, "strict": fmt.strict}


def decode_usage(usage: Any) -> Usage | None:
    """Responses usage, normalised: input tokens include cached ones, output tokens reasoning ones.

    Example:
        >>> from openai.types.responses import ResponseUsage
        >>> decode_usage(ResponseUsage.model_validate({"input_tokens": 120, "output_tokens": 40,
        ...     "input_tokens_details": {"cached_tokens": 64, "cache_write_tokens": 0},
        ...     "output_tokens_details": {"reasoning_tokens": 24},
        ...     "total_tokens": 160}))
        Usage(input_tokens=120, cached_input_tokens=64, cache_write_tokens=0, output_tokens=40, reasoning_tokens=24)
    """
    if usage is None:  # reported none (a proxy may strip it): unknown, not 0
        return None
    into = getattr(usage, "input_tokens_details", None)
    out = getattr(usage, "output_tokens_details", None)
    return Usage(
        input_tokens=usage.input_tokens or 0,
        cached_input_tokens=(getattr(into, "cached_tokens", None) or 0) if into else 0,
        cache_write_tokens=(getattr(into, "cache_write_tokens", None) or 0) if into else 0,
        output_tokens=usage.output_tokens or 0,
        reasoning_tokens=(getattr(out, "reasoning_tokens", None) or 0) if out else 0,
    )


class ResponsesAdapter(ModelAdapter):
    """The Responses API through the ``openai`` SDK's async client."""

    max_concurrency = 32

    def __init__(
        self, model: str, options: OpenAIOptions, clients: ClientShards[openai.AsyncOpenAI], *, wire_model: str
    ) -> None:
        super().__init__(model)
        self.options = options
        self.clients = clients
        self.client = clients.first
        self.wire_model = wire_model

    def cache_identity(self) -> dict[str, Any]:
        """The endpoint answering (a key never is)."""
        return {"base_url": str(self.client.base_url)}

    def encode(self, request: ModelRequest) -> dict[str, Any]:
        """The request body of ``POST /responses`` for ``request`` (``params.extra`` merged in)."""
        p = request.params
        instructions, items = encode_input(request.messages, self.wire_model, self.note)
        kwargs: dict[str, Any] = {"model": self.wire_model, "input": items, "store": False}
        if instructions is not None:
            kwargs["instructions"] = instructions
        if request.tools:
            kwargs["tools"] = encode_tools(request.tools)
            if p.parallel_tool_calls is not None and self.info.parallel_tool_calls:
                kwargs["parallel_tool_calls"] = p.parallel_tool_calls
            elif p.parallel_tool_calls is not None:
                self.note(f"parallel_tool_calls dropped: {refused(self.info, 'parallel_tool_calls switch')}")
        if p.tool_choice is not None:
            kwargs["tool_choice"] = encode_tool_choice(p.tool_choice)
        shared = sampling(p, self.info, self.note, budget_field="max_output_tokens")
        effort = shared.pop("reasoning_effort", None)
        kwargs.update(shared)
        reasoning: dict[str, Any] = {"effort": effort} if effort is not None else {}
        if p.reasoning_summary is not None and self.info.reasoning:
            # Opt-in: OpenAI refuses summaries to organisations it has not verified.
            reasoning["summary"] = p.reasoning_summary
        elif p.reasoning_summary is not None:
            self.note(f"reasoning_summary dropped: {refused(self.info, 'reasoning summaries')}")
        if reasoning:
            kwargs["reasoning"] = reasoning
        if self.info.reasoning:
            # The encrypted reasoning is what a later round of the same turn needs back (nothing is stored).
            kwargs["include"] = ["reasoning.encrypted_content"]
        if p.seed is not None:
            self.note(f"seed={p.seed} dropped: the Responses API takes no seed")
        if p.stop:
            self.note("stop sequences dropped: the Responses API takes none")
        if p.response_format is not None:
            kwargs["text"] = {"format": encode_text_format(p.response_format)}
        key = prompt_cache_key(request.conversation_id) if self._sends_cache_key() else None
        if key is not None:
            kwargs["prompt_cache_key"] = key
        kwargs.update(p.extra)
        return kwargs

    def _sends_cache_key(self) -> bool:
        # OpenAI itself takes the key; an unknown server or an Azure api-version may refuse it unless asked.
        chosen = self.options.prompt_cache_key
        return chosen if chosen is not None else self.options.base_url is None and type(self.options) is OpenAIOptions

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """One call: streamed when ``params.stream`` is set."""
        kwargs = self.encode(request)
        start = time.perf_counter()
        ttft: float | None = None
        summary = kwargs.get("reasoning", {}).get("summary")
        with sdk_errors(openai.OpenAIError, lambda exc: self._mapped(exc, summary), model=self.model,
                        secrets=self.options.secrets):  # fmt: skip
            if request.params.stream:
                final: Any = None
                stream = await self.clients.next().post(
                    "/responses",
                    content=json_body({**kwargs, "stream": True}),
                    cast_to=Response,
                    options=REQUEST_OPTIONS,
                    stream=True,
                    stream_cls=openai.AsyncStream[ResponseStreamEvent],
                )
                request_id = stream.response.headers.get("x-request-id")
                async for event in stream:
                    if ttft is None and event.type in _DELTAS:
                        ttft = (time.perf_counter() - start) * 1000
                    if event.type in ("response.completed", "response.incomplete", "response.failed"):
                        final = event.response
                if final is None:
                    raise TransientError("the stream ended before its last event", model=self.model)
            else:
                raw = await self.clients.next().request(httpx2.Response, post_options("/responses", json_body(kwargs)))
                final = typed_body(Response, raw.content, model=self.model)
                request_id = raw.headers.get("x-request-id")
        return self.decode(final, request_id=request_id, ttft_ms=ttft)

    def _mapped(self, exc: openai.OpenAIError, summary: str | None) -> ProviderError:
        error = map_openai_error(exc, model=self.model, secrets=self.options.secrets())
        if isinstance(error, BadRequestError) and summary is not None and "summar" in str(error).lower():
            return BadRequestError(
                f"the provider refused params.reasoning_summary={summary!r} (OpenAI gives reasoning summaries only "
                f"to verified organisations): unset reasoning_summary or verify the organisation. {error}",
                model=self.model,
                status=error.status,
            )
        return error

    def decode(self, response: Any, *, request_id: str | None, ttft_ms: float | None = None) -> ModelResponse:
        """The canonical response of a Responses API ``Response``."""
        if response.status == "failed":
            error = response.error
            code = getattr(error, "code", "") or ""
            text = f"the response failed: {code}: {getattr(error, 'message', '')}"
            kind = TransientError if code in ("server_error", "rate_limit_exceeded") else BadRequestError
            raise kind(text, model=self.model)
        texts: list[str] = []
        calls: list[ToolCall] = []
        reasoning_items: list[dict[str, Any]] = []
        summaries: list[str] = []
        for item in response.output:
            if item.type == "message":
                for part in item.content:
                    texts.append(part.text if part.type == "output_text" else getattr(part, "refusal", ""))
            elif item.type == "function_call":
                calls.append(ToolCall(id=item.call_id, name=item.name, arguments=item.arguments or ""))
            elif item.type == "reasoning":
                reasoning_items.append(item.model_dump(exclude_none=True, exclude={"status"}))
                summaries.extend(s.text for s in item.summary or ())
        state = None
        if reasoning_items or summaries:
            state = ReasoningState(
                provider=PROVIDER,
                model=self.wire_model,
                data={"items": reasoning_items},
                summary="\n".join(summaries) or None,
            )
        if response.status == "incomplete":
            reason = getattr(response.incomplete_details, "reason", None) or "incomplete"
            finish: FinishReason = _INCOMPLETE.get(reason, "other")
        else:
            reason = response.status
            finish = "tool_calls" if calls else "stop"
        return ModelResponse(
            message=Message(
                role="assistant", content="".join(texts) if texts else None, tool_calls=tuple(calls), reasoning=state
            ),
            finish_reason=finish,
            provider_finish_reason=reason,
            usage=decode_usage(response.usage),
            ttft_ms=ttft_ms,
            served_model=response.model or "",
            request_id=request_id,
        )

    async def aclose(self) -> None:
        """Close the SDK client's connections."""
        for client in self.clients.clients:
            await client.close()


def create(model: str, options: Mapping[str, Any], context: AdapterContext) -> ResponsesAdapter:
    """The factory of ``openai-responses:`` model ids."""
    opts = parse_options(OpenAIOptions, model, options)
    name = split_model_id(model)[1]
    clients = ClientShards(lambda: make_client(opts, model), opts.connection_pools)
    return ResponsesAdapter(model, opts, clients, wire_model=name)
