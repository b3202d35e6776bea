"""``gemini:`` models through the Gemini API (``generateContent``) and the ``google-genai`` SDK.

Wire format: the system prompt is ``systemInstruction``; turns have roles ``user`` and ``model``; an assistant's tool
calls are ``functionCall`` parts (arguments as an object), answered by ``functionResponse`` parts in one ``user``
turn, ``{"output": <the result, as recorded>}``. Tool schemas go as ``parametersJsonSchema``, reduced to the subset
Gemini takes (:mod:`.gemini_schema`); what changed is said once per tool in the run's notes.

A thinking model's turn comes back with a ``thoughtSignature`` on its parts, which Gemini requires back on the next
round of the same turn: the model's parts are kept verbatim in the assistant message's
:class:`~delta_eval.schema.ReasoningState` and resent as they are (to the same model only). Thought summaries are
asked for (``includeThoughts``) and kept on the replay.

Media go as parts before the text of their user turn: bytes as ``inlineData`` (the SDK's ``inline_data`` with the
decoded bytes, which it sends in base64), a URL as ``fileData`` (``fileUri`` and ``mimeType``). A part without a
media type (Gemini requires one), without bytes or URL, or in a tool result (whose response is text) goes as its
placeholder text, said once in the notes.

Usage is normalised: ``promptTokenCount`` includes cached content; the candidates count excludes thoughts, so
output = candidates + thoughts, unless the total shows the candidates already include them.

Example (Python)::

    de.Variant(model="gemini:gemini-2.5-flash", params={"reasoning_effort": "low"})   # GEMINI_API_KEY
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any, cast

from google import genai
from google.genai import errors, types

from delta_eval.adapters.base import ClientShards, ModelAdapter, tls_context
from delta_eval.adapters.batch import BatchBackend
from delta_eval.adapters.errors import sdk_errors, status_error
from delta_eval.adapters.gemini_batch import GeminiBatches
from delta_eval.adapters.gemini_schema import sanitize
from delta_eval.adapters.media import NO_BYTES, Note, decoded, placeholder, with_text
from delta_eval.adapters.options import ProviderOptions, parse_options
from delta_eval.adapters.ratelimit_headers import header_hooks
from delta_eval.adapters.registry import AdapterContext
from delta_eval.adapters.thinking import budget_for_effort, clamp_budget, refused, resolve_effort, wanted_effort
from delta_eval.calls import FinishReason, GenerateParams, ModelRequest, ModelResponse, split_model_id
from delta_eval.exceptions import BadRequestError, ConfigError, ContentFilterError, ProviderError, TransientError
from delta_eval.redact import register_secrets
from delta_eval.schema import MediaPart, Message, ReasoningState, ToolCall, ToolSpec, Usage

__all__ = [
    "PROVIDER",
    "GeminiAdapter",
    "GeminiOptions",
    "create",
    "decode_usage",
    "encode_contents",
    "encode_media",
    "http_options",
]

PROVIDER = "gemini"
_FINISH: dict[str, FinishReason] = {"STOP": "stop", "MAX_TOKENS": "length", "CONTINUATION": "length"}
_FILTERED = {
    "SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "LANGUAGE", "IMAGE_SAFETY",
    "IMAGE_PROHIBITED_CONTENT", "IMAGE_RECITATION", "MODEL_ARMOR", "ESCALATION", "PUP_LIMITED_DISABLED",
}  # fmt: skip
_INVALID = {
    "MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL", "TOO_MANY_TOOL_CALLS", "MISSING_THOUGHT_SIGNATURE",
    "MALFORMED_RESPONSE",
}  # fmt: skip
_LEVELS = {"minimal": "MINIMAL", "low": "LOW", "medium": "MEDIUM", "high": "HIGH", "xhigh": "XHIGH", "max": "XHIGH"}


class GeminiOptions(ProviderOptions):
    """Options of ``gemini:`` models (and those of :class:`~delta_eval.adapters.options.ProviderOptions`).

    ``api_version`` is the path's version: ``v1beta`` by default, the version Gemini documents system instructions,
    tools and thinking configuration on (its ``v1`` refuses them).
    """

    api_version: str = "v1beta"


def _output(content: str | None) -> Any:
    return {"output": content or ""}


def encode_media(part: MediaPart, note: Note = None) -> dict[str, Any]:
    """One media part as a part of ``contents`` (the SDK's snake_case dicts; a text part holding its placeholder
    where Gemini cannot take it, ``note`` told why).

    Example:
        >>> encode_media(MediaPart.from_url("image", "https://example.com/a.png", "image/png"))
        {'file_data': {'mime_type': 'image/png', 'file_uri': 'https://example.com/a.png'}}
    """
    if part.media_type and part.data is not None:
        return {"inline_data": {"mime_type": part.media_type, "data": decoded(part)}}
    if part.media_type and part.url is not None:
        return {"file_data": {"mime_type": part.media_type, "file_uri": part.url}}
    why = NO_BYTES if part.data is None and part.url is None else "Gemini needs the media type of a part"
    return {"text": placeholder(part, note, why)}


def encode_contents(
    messages: Sequence[Message], wire_model: str, note: Note = None
) -> tuple[str | None, list[dict[str, Any]]]:
    """The system instruction and the ``contents`` for canonical messages (as the SDK's snake_case dicts); ``note``
    is told of media sent as placeholder text."""
    system = [m.content or "" for m in messages if m.role == "system"]
    contents: list[dict[str, Any]] = []
    names: dict[str, str] = {}  # tool call id -> function name, for the responses

    def add(role: str, parts: list[dict[str, Any]]) -> None:
        if contents and contents[-1]["role"] == role:
            contents[-1]["parts"].extend(parts)
        else:
            contents.append({"role": role, "parts": parts})

    for m in messages:
        if m.role == "system":
            continue
        if m.role == "assistant":
            names.update({c.id: c.name for c in m.tool_calls})
            state = m.reasoning
            if state is not None and state.provider == PROVIDER and state.model == wire_model:
                add("model", [dict(p) for p in (state.data or {}).get("parts", [])])
                continue
            parts: list[dict[str, Any]] = [{"text": m.content}] if m.content else []
            for c in m.tool_calls:
                args = c.parsed_arguments
                call: dict[str, Any] = {"name": c.name, "args": args if isinstance(args, dict) else {}}
                if not c.id.startswith("gemini_"):
                    call["id"] = c.id
                parts.append({"function_call": call})
            add("model", parts)
        elif m.role == "tool":
            call_id = m.tool_call_id or ""
            why = "a function response is sent as text"
            text = with_text([placeholder(p, note, why) for p in m.media], m.content) if m.media else m.content
            response: dict[str, Any] = {"name": m.name or names.get(call_id, ""), "response": _output(text)}
            if call_id and not call_id.startswith("gemini_"):
                response["id"] = call_id
            add("user", [{"function_response": response}])
        elif m.media:
            add("user", [*(encode_media(p, note) for p in m.media), *([{"text": m.content}] if m.content else [])])
        else:
            add("user", [{"text": m.content or ""}])
    return ("\n\n".join(system) if system else None), contents


def decode_usage(usage: Any) -> Usage | None:
    """Gemini usage, normalised: thoughts count as output, once.

    Example:
        >>> from google.genai import types
        >>> decode_usage(types.GenerateContentResponseUsageMetadata(prompt_token_count=61,
        ...     candidates_token_count=15, thoughts_token_count=40, total_token_count=116))
        Usage(input_tokens=61, cached_input_tokens=0, cache_write_tokens=0, output_tokens=55, reasoning_tokens=40)
    """
    if usage is None:  # reported none (a proxy may strip it): unknown, not 0
        return None
    prompt = (usage.prompt_token_count or 0) + (usage.tool_use_prompt_token_count or 0)
    candidates = usage.candidates_token_count or 0
    thoughts = usage.thoughts_token_count or 0
    # Some backends already fold thoughts into the candidates count; the total says which.
    folded = usage.total_token_count is not None and prompt + candidates == usage.total_token_count
    return Usage(
        input_tokens=prompt,
        cached_input_tokens=usage.cached_content_token_count or 0,
        output_tokens=candidates if folded else candidates + thoughts,
        reasoning_tokens=thoughts,
    )


def _retry_delay(details: Any) -> dict[str, str]:
    # Gemini says how long to wait in a google.rpc.RetryInfo detail ("30s"), not in a header.
    for detail in (details or {}).get("error", {}).get("details", []) if isinstance(details, dict) else []:
        delay = detail.get("retryDelay") if isinstance(detail, dict) else None
        if isinstance(delay, str) and re.fullmatch(r"[\d.]+s", delay):
            return {"retry-after": delay[:-1]}
    return {}


class GeminiAdapter(ModelAdapter):
    """Gemini models through the ``google-genai`` SDK's async client."""

    max_concurrency = 16

    def __init__(self, model: str, options: GeminiOptions, clients: ClientShards[genai.Client]) -> None:
        super().__init__(model)
        self.options = options
        self.clients = clients
        self.wire_model = split_model_id(model)[1]
        self._tools: dict[tuple[str, str], dict[str, Any]] = {}

    def cache_identity(self) -> dict[str, Any]:
        """The endpoint and API version answering (a key never is)."""
        return {"base_url": self.options.base_url or "", "api_version": self.options.api_version or ""}

    def batch_backend(self) -> BatchBackend | None:
        """The Gemini API's batch mode (:mod:`.gemini_batch`); Vertex AI's batch prediction is not wired in."""
        return GeminiBatches(self) if type(self) is GeminiAdapter else None

    def _declaration(self, tool: ToolSpec) -> dict[str, Any]:
        key = (tool.name, json.dumps(tool.parameters, sort_keys=True))
        if key not in self._tools:
            schema, changes = sanitize(tool.parameters)
            if changes:
                self.note(f"tool {tool.name}: schema adapted for Gemini: {'; '.join(changes)}")
            self._tools[key] = {"name": tool.name, "description": tool.description, "parameters_json_schema": schema}
        return self._tools[key]

    def _thinking(self, p: GenerateParams) -> dict[str, Any] | None:
        """The ``thinking_config`` as this model generation takes it (from the model catalogue): a
        ``thinking_level`` for Gemini 3 and later, a ``thinking_budget`` within the model's range for 2.5, nothing
        for models that do not think (2.0 refuses any thinking configuration)."""
        info = self.info
        if p.reasoning_budget is None and p.reasoning_effort is None:
            return None
        if not info.reasoning:
            if p.reasoning_budget != 0 and p.reasoning_effort != "none":
                self.note(f"reasoning parameters dropped: {refused(info, 'thinking configuration')}")
            return None
        if info.efforts:  # a thinking level; Gemini 3 cannot turn thinking off
            wanted = wanted_effort(p, self.note)
            level = resolve_effort(wanted, info, self.note) if wanted is not None else None
            return {"thinking_level": _LEVELS[level], "include_thoughts": True} if level is not None else None
        if not info.budget:
            self.note(f"reasoning parameters dropped: {refused(info, 'thinking configuration')}")
            return None
        budget = p.reasoning_budget
        if budget is None:
            budget = budget_for_effort(p.reasoning_effort or "medium")
            self.note(f"reasoning effort {p.reasoning_effort!r} sent as a thinking budget of {budget} tokens "
                      f"({info.model} takes a budget, not a level)")  # fmt: skip
        if budget == 0 and not info.thinking_off:
            self.note(f"thinking stays on at the smallest budget: {info.model} cannot turn it off")
            budget = info.budget_min or 1
        if budget != 0:
            budget = clamp_budget(budget, info, self.note)
        return {"thinking_budget": budget, "include_thoughts": budget != 0}

    def encode(self, request: ModelRequest) -> tuple[list[dict[str, Any]], types.GenerateContentConfig]:
        """The ``contents`` and ``config`` of ``models.generate_content`` for ``request``."""
        p = request.params
        system, contents = encode_contents(request.messages, self.wire_model, self.note)
        config: dict[str, Any] = {"automatic_function_calling": {"disable": True}}
        if system is not None:
            config["system_instruction"] = system
        if request.tools:
            config["tools"] = [{"function_declarations": [self._declaration(t) for t in request.tools]}]
        if p.tool_choice is not None:
            calling: dict[str, Any]
            if isinstance(p.tool_choice, str):
                calling = {"mode": {"auto": "AUTO", "none": "NONE", "required": "ANY"}[p.tool_choice]}
            else:  # one named function: any call, of that function only
                calling = {"mode": "ANY", "allowed_function_names": [p.tool_choice.name]}
            config["tool_config"] = {"function_calling_config": calling}
        if p.parallel_tool_calls is False:
            self.note("parallel_tool_calls=false dropped: Gemini has no switch for it")
        for name in ("temperature", "top_p"):
            if getattr(p, name) is not None and self.info.sampling:
                config[name] = getattr(p, name)
            elif getattr(p, name) is not None:
                self.note(f"{name} dropped: {refused(self.info, 'sampling parameters (temperature, top_p)')}")
        if p.seed is not None:
            config["seed"] = p.seed
        if p.max_tokens is not None:
            config["max_output_tokens"] = p.max_tokens
        if p.stop:
            config["stop_sequences"] = list(p.stop)
        thinking = self._thinking(p)
        if thinking is not None:
            config["thinking_config"] = thinking
        if p.response_format is not None and p.response_format.type != "text":
            config["response_mime_type"] = "application/json"
            if p.response_format.json_schema is not None:
                config["response_json_schema"] = p.response_format.json_schema
        if p.extra:
            config["http_options"] = {"extra_body": dict(p.extra)}
        return contents, types.GenerateContentConfig.model_validate(config)

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """One call: streamed when ``params.stream`` is set."""
        contents, config = self.encode(request)
        start = time.perf_counter()
        ttft: float | None = None
        with sdk_errors(errors.APIError, self._error, model=self.model, secrets=self.options.secrets):
            if request.params.stream:
                chunks: list[Any] = []
                stream = await self.clients.next().aio.models.generate_content_stream(
                    model=self.wire_model, contents=cast(Any, contents), config=config
                )
                async for chunk in stream:
                    if ttft is None and any(p.text or p.function_call for p in _parts(chunk)):
                        ttft = (time.perf_counter() - start) * 1000
                    chunks.append(chunk)
                return self.decode(chunks, ttft_ms=ttft)
            # The contents are the wire's dicts; the SDK's hints (a union of its TypedDicts) do not take them.
            response = await self.clients.next().aio.models.generate_content(
                model=self.wire_model, contents=cast(Any, contents), config=config
            )
        return self.decode([response])

    def _error(self, exc: errors.APIError) -> ProviderError:
        headers = dict(getattr(exc.response, "headers", None) or {})
        headers.update(_retry_delay(exc.details))
        return status_error(
            exc.code or 500,
            exc.message or str(exc),
            model=self.model,
            headers=headers,
            code=exc.status,
            secrets=self.options.secrets(),
        )

    def decode(self, chunks: list[Any], *, ttft_ms: float | None = None) -> ModelResponse:
        """The canonical response of a whole response, or of a stream's chunks joined."""
        last = chunks[-1] if chunks else None
        if last is None or not last.candidates:
            feedback = getattr(last, "prompt_feedback", None)
            reason = getattr(feedback, "block_reason", None)
            if reason is not None:
                raise ContentFilterError(f"the prompt was blocked ({_name(reason)})", model=self.model)
            raise TransientError("the response holds no candidate", model=self.model)
        parts = [p for chunk in chunks for p in _parts(chunk)]
        finish = _name(last.candidates[0].finish_reason)
        if not finish:
            # A stream ends with the finish reason; without one it was cut short, and must not be cached.
            raise TransientError("the stream ended before its last event", model=self.model)
        if finish in _INVALID:
            raise BadRequestError(f"the model's answer was refused by Gemini ({finish})", model=self.model)
        texts = [p.text for p in parts if p.text and not p.thought]
        thoughts = [p.text for p in parts if p.text and p.thought]
        calls = tuple(
            ToolCall(
                id=p.function_call.id or f"gemini_{k}_{p.function_call.name}",
                name=p.function_call.name or "",
                arguments=json.dumps(p.function_call.args or {}, ensure_ascii=False),
            )
            for k, p in enumerate(q for q in parts if q.function_call)
        )
        state = None
        if thoughts or any(p.thought_signature for p in parts):
            # The model's parts exactly as they came, signatures included, to be resent as they are.
            kept = [p.model_dump(mode="json", exclude_none=True) for p in parts]
            state = ReasoningState(
                provider=PROVIDER, model=self.wire_model, data={"parts": kept}, summary="".join(thoughts) or None
            )
        if finish in _FILTERED:
            canonical: FinishReason = "content_filter"
        elif calls and finish == "STOP":
            canonical = "tool_calls"
        else:
            canonical = _FINISH.get(finish, "other")
        return ModelResponse(
            message=Message(
                role="assistant", content="".join(texts) if texts else None, tool_calls=calls, reasoning=state
            ),
            finish_reason=canonical,
            provider_finish_reason=finish,
            usage=decode_usage(last.usage_metadata),
            ttft_ms=ttft_ms,
            served_model=last.model_version or "",
            request_id=last.response_id,
        )

    async def aclose(self) -> None:
        """Close the SDK client's connections."""
        for client in self.clients.clients:
            await client.aio.aclose()


def _parts(chunk: Any) -> list[Any]:
    if not chunk.candidates or chunk.candidates[0].content is None:
        return []
    return list(chunk.candidates[0].content.parts or [])


def _name(value: Any) -> str:
    return str(getattr(value, "value", value) or "")


def http_options(opts: ProviderOptions, *, api_version: str | None) -> types.HttpOptions:
    """The HTTP options of one ``genai.Client``: the options' timeout, endpoint and headers, and httpx2 with a
    transport of the client's own (each client its own connection pool) on the shared TLS context, whose responses
    hand their rate-limit headers to the call's limiter.

    The transport is named because google-genai switches to aiohttp of its own accord where aiohttp is installed
    (the ``openai`` and ``anthropic`` adapters use it), and its aiohttp path would skip the header hooks.
    """
    import httpx2  # the HTTP stack of the provider SDKs, installed with them

    http: dict[str, Any] = {
        "timeout": int(opts.timeout * 1000),
        "async_client_args": {
            "verify": tls_context(),
            "event_hooks": header_hooks(),
            "transport": httpx2.AsyncHTTPTransport(verify=tls_context()),
        },
    }
    if opts.base_url:
        http["base_url"] = opts.base_url
    if api_version:
        http["api_version"] = api_version
    if opts.headers:
        http["headers"] = opts.header_values()
    return types.HttpOptions.model_validate(http)


def create(model: str, options: Mapping[str, Any], context: AdapterContext) -> GeminiAdapter:
    """The factory of ``gemini:`` model ids."""
    opts = parse_options(GeminiOptions, model, options)
    key = opts.key(None, model=model, required=False) or _google_key(model)
    clients = ClientShards(
        lambda: genai.Client(api_key=key, http_options=http_options(opts, api_version=opts.api_version)),
        opts.connection_pools,
    )
    return GeminiAdapter(model, opts, clients)


def _google_key(model: str) -> str:
    # The SDK's own order: GOOGLE_API_KEY, then GEMINI_API_KEY.
    for name in ("GOOGLE_API_KEY", "GEMINI_API_KEY"):
        if os.environ.get(name):
            register_secrets([os.environ[name]])  # scrubbed from whatever the run writes
            return os.environ[name]
    raise ConfigError(f"{model}: no API key; set GEMINI_API_KEY (or name another variable with api_key_env)")
