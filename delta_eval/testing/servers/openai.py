"""A fake OpenAI server: Chat Completions and Responses, at OpenAI's paths and Azure's.

Endpoints: ``POST /v1/chat/completions``, ``POST /v1/responses`` and ``POST /v1/embeddings`` (also under
``/openai/v1/``, Azure's v1 API), the Files and Batch APIs (:mod:`.openai_batch`, :attr:`FakeOpenAIServer.batch`),
and ``POST /openai/deployments/{deployment}/chat/completions?api-version=...`` (Azure's classic API, where the
deployment names the model). Like the real service it rejects, with a 400 in OpenAI's error shape: an assistant tool
call left unanswered; a malformed image, file or audio part (:mod:`.media`); what the model's family refuses
(:mod:`.model_rules`: sampling parameters, ``max_tokens``, ``stop``, effort values, ``reasoning_effort`` on a
non-reasoning model, ...); ``reasoning.summary`` unless the server stands for a verified organisation
(``verified_organization=True``); under an Azure classic ``api-version``, any field that version does not declare;
``parallel_tool_calls`` without tools; and, when a model thinks, a Responses ``function_call`` sent back without the
``reasoning`` item (with its ``encrypted_content``) that came with it. A Chat Completions stream carries usage only in a
last chunk, and only when ``stream_options.include_usage`` asks for it.

Example:
    >>> import openai, anyio
    >>> async def ask(server: FakeOpenAIServer) -> str | None:
    ...     async with openai.AsyncOpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0) as client:
    ...         reply = await client.chat.completions.create(
    ...             model="gpt-4.1-mini", messages=[{"role": "user", "content": "hi"}])
    ...         return reply.choices[0].message.content
    >>> with FakeOpenAIServer(respond=lambda request: Message(role="assistant", content="hello")) as server:
    ...     anyio.run(ask, server), server.requests[0].path
    ('hello', '/v1/chat/completions')
"""

from __future__ import annotations

import base64
import hashlib
import math
import re
import struct
from typing import Any

from delta_eval.calls import GenerateParams, ModelRequest
from delta_eval.schema import Message, ToolCall, ToolSpec, Usage
from delta_eval.testing.servers.decoded import DecodedParts, RequestFrames
from delta_eval.testing.servers.http import JSONReply, Request
from delta_eval.testing.servers.media import check_chat_part, check_responses_part
from delta_eval.testing.servers.model_rules import azure_undeclared, check_openai
from delta_eval.testing.servers.openai_batch import BatchAPI
from delta_eval.testing.servers.prompt_cache import request_blocks
from delta_eval.testing.servers.provider import (
    Answer,
    FakeProviderServer,
    Route,
    WireError,
    check_strict_schema,
    schema_params,
    sign,
    sse,
)

__all__ = ["FakeOpenAIServer"]

_CHAT = re.compile(r"^(?:/openai)?(?:/v1)?/chat/completions$")
_AZURE_CHAT = re.compile(r"^/openai/deployments/(?P<deployment>[^/]+)/chat/completions$")
_RESPONSES = re.compile(r"^(?:/openai)?(?:/v1)?/responses$")
_EMBEDDINGS = re.compile(r"^(?:/openai)?(?:/v1)?/embeddings$")
_CREATED = 1767225600
_NO_FORMAT = GenerateParams()  # the parameters of every request that asks for no format (frozen: one object)


def _text(content: Any) -> str | None:
    if content is None or isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if isinstance(part, dict))


def _chunks(text: str, size: int = 12) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


class FakeOpenAIServer(FakeProviderServer):
    """OpenAI's Chat Completions and Responses APIs, answered by the simulated model.

    ``base_url`` is what ``openai.AsyncOpenAI(base_url=...)`` takes; ``azure_endpoint`` what
    ``openai.AsyncAzureOpenAI(azure_endpoint=...)`` takes. Pass ``api_key`` to have requests without it refused
    with a 401, as the real service does, and ``verified_organization=True`` to accept ``reasoning.summary`` (an
    unverified organisation, the default, gets OpenAI's 400 for it).
    """

    def __init__(
        self, *args: Any, api_key: str | None = None, verified_organization: bool = False, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.api_key = api_key
        self.verified_organization = verified_organization
        # call_id -> the reasoning items issued with it (the seeded model may give two answers the same call id)
        self._reasoning_items: dict[str, set[str]] = {}
        # The canonical objects decoded from recent requests' parts (each keyed with the API whose decoder built it).
        self._messages = DecodedParts[Message]()
        self._tools = DecodedParts[tuple[ToolSpec, ...]](maxsize=256)
        self._formats = DecodedParts[GenerateParams](maxsize=256)
        self._frames = RequestFrames()
        #: The Files and Batch endpoints; each batch line is answered by this server's own flow.
        self.batch = BatchAPI(lambda line: FakeProviderServer.handle(self, line), self.error)

    @property
    def base_url(self) -> str:
        """The OpenAI base URL of this server."""
        return f"{self.url}/v1"

    @property
    def azure_endpoint(self) -> str:
        """The Azure endpoint of this server."""
        return self.url

    # -- routing and errors ---------------------------------------------------------------------------------

    def route(self, request: Request) -> Route | None:
        if request.method != "POST":
            return None
        body = request.data or {}
        # A chat stream carries usage only when the request asks for it, as OpenAI's does.
        usage = bool((body.get("stream_options") or {}).get("include_usage")) if body.get("stream") else True
        azure = _AZURE_CHAT.match(request.path)
        if azure:
            return Route(azure.group("deployment"), bool(body.get("stream")), "chat", usage)
        for api, pattern in (("chat", _CHAT), ("responses", _RESPONSES)):
            if pattern.match(request.path):
                return Route(str(body.get("model", "")), bool(body.get("stream")), api, usage)
        return None

    async def handle(self, request: Request) -> Any:
        if self.api_key is not None and not (
            request.presented("authorization", f"Bearer {self.api_key}") or request.presented("api-key", self.api_key)
        ):
            return self.error(401, "auth", "Incorrect API key provided.")
        if self.batch.matches(request.path):
            return await self.batch.handle(request)
        if _EMBEDDINGS.match(request.path):
            return self.embeddings(request)
        return await super().handle(request)

    def embeddings(self, request: Request) -> JSONReply:
        """``POST /v1/embeddings``: a hashed bag of words per input (texts sharing words are close), as floats or,
        as the SDK asks by default, base64 of little-endian float32."""
        body = request.data or {}
        inputs = body.get("input")
        texts = [inputs] if isinstance(inputs, str) else inputs
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) and t for t in texts):
            return self.error(400, "invalid", "'input' must be a non-empty string or a list of non-empty strings.")
        dims = int(body.get("dimensions") or 64)
        data = []
        for i, text in enumerate(texts):
            vector = [0.0] * dims
            for word in re.findall(r"\w+", text.lower()):
                vector[int(hashlib.md5(word.encode(), usedforsecurity=False).hexdigest(), 16) % dims] += 1.0
            norm = math.sqrt(sum(v * v for v in vector)) or 1.0
            vector = [v / norm for v in vector]
            if body.get("encoding_format") == "base64":
                encoded: Any = base64.b64encode(struct.pack(f"<{dims}f", *vector)).decode()
            else:
                encoded = vector
            data.append({"object": "embedding", "index": i, "embedding": encoded})
        tokens = sum(len(t.split()) for t in texts)
        reply = {"object": "list", "data": data, "model": body.get("model", ""),
                 "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}  # fmt: skip
        return JSONReply(reply, headers={"x-request-id": f"req_emb{len(self.requests)}"})

    def error(
        self, status: int, kind: str, message: str, *, param: str | None = None, code: str | None = None
    ) -> JSONReply:
        kinds = {
            "rate_limit": ("requests", "rate_limit_exceeded"),
            "server": ("server_error", None),
            "context_length": ("invalid_request_error", "context_length_exceeded"),
            "not_found": ("invalid_request_error", "not_found"),
            "auth": ("invalid_request_error", "invalid_api_key"),
        }
        type_, kind_code = kinds.get(kind, ("invalid_request_error", None))
        body = {"error": {"message": message, "type": type_, "param": param, "code": code or kind_code}}
        return JSONReply(body, status=status, headers={"x-request-id": f"req_err{len(self.requests)}"})

    # -- requests -------------------------------------------------------------------------------------------

    def cache_usage(self, request: Request, canonical: ModelRequest, usage: Usage, ready_in_s: float) -> Usage:
        """The implicit prompt cache: the longest prefix of the conversation seen before."""
        assert self.prompt_cache is not None
        blocks = request_blocks(canonical)
        return self.prompt_cache.openai(canonical.model, blocks, total=usage.input_tokens, ready_in_s=ready_in_s)

    def decode(self, request: Request, route: Route) -> ModelRequest:
        body, model = request.data or {}, route.model
        if _AZURE_CHAT.match(request.path):
            undeclared = azure_undeclared(request.query.get("api-version", ""), body)
            if undeclared is not None:
                raise WireError(undeclared.message)
        refusal = check_openai(model, body, api=route.api, verified_organization=self.verified_organization)
        if refusal is not None:
            raise WireError(refusal.message, param=refusal.param, code=refusal.code)
        if body.get("parallel_tool_calls") is not None and not body.get("tools"):
            raise WireError("parallel_tool_calls is only allowed when 'tools' are specified.")
        if route.api == "chat":
            messages, tools = self._chat_messages(body), self._chat_tools(body)
        else:
            messages, tools = self._responses_input(body), self._responses_tools(body)
        return self._frames.request(model, tuple(messages), tools, self._format(body, route))

    def _format(self, body: dict[str, Any], route: Route) -> GenerateParams:
        # Chat: response_format {type, json_schema: {name, schema, strict}}; Responses: text.format {type, name,
        # schema, strict}. A strict schema OpenAI would reject is a 400, as there.
        if route.api == "chat":
            fmt = body.get("response_format") or {}
            spec = fmt.get("json_schema") or {} if fmt.get("type") == "json_schema" else {}
        else:
            fmt = (body.get("text") or {}).get("format") or {}
            spec = fmt if fmt.get("type") == "json_schema" else {}
        if not spec:
            return _NO_FORMAT
        if "schema" not in spec or "name" not in spec:
            raise WireError("Missing required parameter: 'response_format.json_schema.schema' / 'name'.")
        if spec.get("strict"):
            check_strict_schema(spec["schema"], spec["name"])
        return self._formats.get(spec, lambda: schema_params(spec["schema"], spec["name"]))

    def _chat_tools(self, body: dict[str, Any]) -> tuple[ToolSpec, ...]:
        tools = body.get("tools") or []
        return self._tools.get(("chat", tools), lambda: tuple(
            ToolSpec(name=t["function"]["name"], description=t["function"].get("description") or "",
                     parameters=t["function"].get("parameters") or {})
            for t in tools
        ))  # fmt: skip

    def _chat_message(self, m: dict[str, Any], role: str) -> Message:
        # The canonical message of one Chat Completions message (``role`` read from it), built once while kept.
        def build() -> Message:
            if role == "assistant":
                calls = tuple(
                    ToolCall(id=c["id"], name=c["function"]["name"], arguments=c["function"]["arguments"])
                    for c in m.get("tool_calls") or []
                )
                return Message(role="assistant", content=_text(m.get("content")), tool_calls=calls)
            if role == "tool":
                return Message(role="tool", tool_call_id=m["tool_call_id"], content=_text(m.get("content")))
            return Message(role=role, content=_text(m.get("content")) or "")

        return self._messages.get(("chat", m), build)

    def _chat_messages(self, body: dict[str, Any]) -> list[Message]:
        out: list[Message] = []
        open_calls: list[str] = []
        for i, m in enumerate(body.get("messages") or []):
            role = "system" if m["role"] == "developer" else m["role"]
            if isinstance(m.get("content"), list) and role != "assistant":
                for j, part in enumerate(m["content"]):
                    check_chat_part(part, f"messages[{i}].content[{j}]", text_only=role != "user")
            if role != "tool" and open_calls:
                raise WireError(
                    "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
                    f"'tool_call_id'. The following tool_call_ids did not have response messages: {open_calls[0]}"
                )
            if role == "assistant":
                message = self._chat_message(m, role)
                open_calls = [c.id for c in message.tool_calls]
                out.append(message)
            elif role == "tool":
                if m.get("tool_call_id") not in open_calls:
                    raise WireError(f"messages[{i}]: tool message answers no open tool call")
                open_calls.remove(m["tool_call_id"])
                out.append(self._chat_message(m, role))
            else:
                out.append(self._chat_message(m, role))
        if open_calls:
            raise WireError(f"tool call {open_calls[0]} has no tool message answering it")
        return out

    def _responses_tools(self, body: dict[str, Any]) -> tuple[ToolSpec, ...]:
        tools = body.get("tools") or []
        return self._tools.get(("responses", tools), lambda: tuple(
            ToolSpec(name=t["name"], description=t.get("description") or "", parameters=t.get("parameters") or {})
            for t in tools
            if t.get("type") == "function"
        ))  # fmt: skip

    def _responses_input(self, body: dict[str, Any]) -> list[Message]:
        out: list[Message] = []
        if body.get("instructions"):
            out.append(Message(role="system", content=body["instructions"]))
        items = body.get("input") or []
        if isinstance(items, str):
            items = [{"role": "user", "content": items}]
        reasoning_seen: set[str] = set()
        open_calls: list[str] = []
        for i, item in enumerate(items):
            kind = item.get("type", "message")
            parts = item.get("content") if kind == "message" else item.get("output")
            if isinstance(parts, list):
                for j, part in enumerate(parts):
                    check_responses_part(part, f"input[{i}].{'content' if kind == 'message' else 'output'}[{j}]")
            if kind == "reasoning":
                if item.get("encrypted_content") != sign("reasoning", item.get("id", "")):
                    raise WireError(f"Item '{item.get('id')}' of type 'reasoning' has invalid encrypted_content.")
                reasoning_seen.add(item["id"])
            elif kind == "function_call":
                needed = self._reasoning_items.get(item["call_id"])
                if needed and not needed & reasoning_seen:
                    raise WireError(
                        f"Item '{item['call_id']}' of type 'function_call' was provided without its required "
                        f"'reasoning' item: '{min(needed)}'."
                    )
                call = ToolCall(id=item["call_id"], name=item["name"], arguments=item["arguments"])
                open_calls.append(call.id)
                if out and out[-1].role == "assistant":
                    last = out.pop()
                    out.append(last.model_copy(update={"tool_calls": (*last.tool_calls, call)}))
                else:
                    out.append(Message(role="assistant", tool_calls=(call,)))
            elif kind == "function_call_output":
                if item["call_id"] not in open_calls:
                    raise WireError(f"No tool call found for function call output with call_id {item['call_id']}.")
                open_calls.remove(item["call_id"])
                out.append(Message(role="tool", tool_call_id=item["call_id"], content=_text(item.get("output"))))
            else:
                role = "system" if item["role"] == "developer" else item["role"]
                out.append(Message(role=role, content=_text(item.get("content")) or ""))
        return out

    # -- answers --------------------------------------------------------------------------------------------

    def encode(self, answer: Answer) -> JSONReply:
        headers = {"x-request-id": f"req_{answer.response_id}"}
        if answer.route.api == "chat":
            return JSONReply(self._completion(answer), headers=headers)
        return JSONReply(self._response(answer, "completed"), headers=headers)

    def encode_stream(self, answer: Answer) -> list[bytes]:
        return self._chat_stream(answer) if answer.route.api == "chat" else self._responses_stream(answer)

    @staticmethod
    def _chat_usage(answer: Answer) -> dict[str, Any]:
        u = answer.usage
        return {
            "prompt_tokens": u.input_tokens,
            "completion_tokens": u.output_tokens,
            "total_tokens": u.input_tokens + u.output_tokens,
            "prompt_tokens_details": {
                "cached_tokens": u.cached_input_tokens,
                "cache_write_tokens": u.cache_write_tokens,
            },
            "completion_tokens_details": {"reasoning_tokens": u.reasoning_tokens},
        }

    def _completion(self, answer: Answer) -> dict[str, Any]:
        m = answer.message
        message: dict[str, Any] = {"role": "assistant", "content": m.content, "refusal": None}
        if m.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in m.tool_calls
            ]
        return {
            "id": f"chatcmpl-{answer.response_id}",
            "object": "chat.completion",
            "created": _CREATED,
            "model": answer.model,
            "choices": [{"index": 0, "message": message, "finish_reason": answer.finish, "logprobs": None}],
            "usage": self._chat_usage(answer),
            "system_fingerprint": "fp_fake",
        }

    def _chat_stream(self, answer: Answer) -> list[bytes]:
        m = answer.message
        base = {"id": f"chatcmpl-{answer.response_id}", "object": "chat.completion.chunk", "created": _CREATED,
                "model": answer.model}  # fmt: skip

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            return sse({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

        events = [chunk({"role": "assistant", "content": None})]
        if m.content:
            events += [chunk({"content": piece}) for piece in _chunks(m.content)]
        for k, call in enumerate(m.tool_calls):
            head = {"index": k, "id": call.id, "type": "function", "function": {"name": call.name, "arguments": ""}}
            events.append(chunk({"tool_calls": [head]}))
            events += [
                chunk({"tool_calls": [{"index": k, "function": {"arguments": piece}}]})
                for piece in _chunks(call.arguments, 8)
            ]
        events.append(chunk({}, answer.finish))
        if answer.route.include_usage:
            events.append(sse({**base, "choices": [], "usage": self._chat_usage(answer)}))
        events.append(b"data: [DONE]\n\n")
        return events

    def _output_items(self, answer: Answer) -> list[dict[str, Any]]:
        m, rid = answer.message, answer.response_id
        items: list[dict[str, Any]] = []
        if answer.thinking:
            reasoning_id = f"rs_{rid}"
            items.append(
                {"type": "reasoning", "id": reasoning_id, "encrypted_content": sign("reasoning", reasoning_id),
                 "summary": [{"type": "summary_text", "text": "I should follow the policy and check first."}]}
            )  # fmt: skip
            for call in m.tool_calls:
                self._reasoning_items.setdefault(call.id, set()).add(reasoning_id)
        if m.content:
            items.append(
                {"type": "message", "id": f"msg_{rid}", "role": "assistant", "status": "completed",
                 "content": [{"type": "output_text", "text": m.content, "annotations": [], "logprobs": []}]}
            )  # fmt: skip
        for k, call in enumerate(m.tool_calls):
            items.append(
                {"type": "function_call", "id": f"fc_{rid}_{k}", "call_id": call.id, "name": call.name,
                 "arguments": call.arguments, "status": "completed"}
            )  # fmt: skip
        return items

    def _response(self, answer: Answer, status: str, output: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        u = answer.usage
        # The Response echoes the request's settings (every field OpenAI's spec marks required is present); usage
        # comes once the response is done.
        asked = (answer.request.data if answer.request is not None else None) or {}
        reasoning = asked.get("reasoning") or {}
        response: dict[str, Any] = {
            "id": f"resp_{answer.response_id}",
            "object": "response",
            "created_at": _CREATED,
            "status": status,
            "model": answer.model,
            "output": self._output_items(answer) if output is None else output,
            "instructions": asked.get("instructions"),
            "metadata": asked.get("metadata") or {},
            "temperature": asked.get("temperature", 1.0),
            "top_p": asked.get("top_p", 1.0),
            "parallel_tool_calls": asked.get("parallel_tool_calls", True),
            "tool_choice": asked.get("tool_choice", "auto"),
            "tools": asked.get("tools") or [],
            "max_output_tokens": asked.get("max_output_tokens"),
            "previous_response_id": asked.get("previous_response_id"),
            "reasoning": {"effort": reasoning.get("effort"), "summary": reasoning.get("summary")},
            "store": asked.get("store", True),
            "text": asked.get("text") or {"format": {"type": "text"}},
            "truncation": asked.get("truncation", "disabled"),
            "user": asked.get("user"),
            "error": None,
            "incomplete_details": None,
        }
        if status != "completed":
            return {**response, "usage": None}
        return {
            **response,
            "usage": {
                "input_tokens": u.input_tokens,
                "input_tokens_details": {
                    "cached_tokens": u.cached_input_tokens,
                    "cache_write_tokens": u.cache_write_tokens,
                },
                "output_tokens": u.output_tokens,
                "output_tokens_details": {"reasoning_tokens": u.reasoning_tokens},
                "total_tokens": u.input_tokens + u.output_tokens,
            },
        }

    def _responses_stream(self, answer: Answer) -> list[bytes]:
        items = self._output_items(answer)
        events: list[dict[str, Any]] = [
            {"type": "response.created", "response": self._response(answer, "in_progress", [])},
            {"type": "response.in_progress", "response": self._response(answer, "in_progress", [])},
        ]
        for index, item in enumerate(items):
            start = {**item, "status": "in_progress"}
            if item["type"] == "message":
                start["content"] = []
            if item["type"] == "function_call":
                start["arguments"] = ""
            events.append({"type": "response.output_item.added", "output_index": index, "item": start})
            if item["type"] == "message":
                text = item["content"][0]["text"]
                part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
                at = {"item_id": item["id"], "output_index": index, "content_index": 0}
                events.append({"type": "response.content_part.added", **at, "part": part})
                events += [
                    {"type": "response.output_text.delta", **at, "delta": piece, "logprobs": []}
                    for piece in _chunks(text)
                ]
                events.append({"type": "response.output_text.done", **at, "text": text, "logprobs": []})
                events.append({"type": "response.content_part.done", **at, "part": item["content"][0]})
            elif item["type"] == "function_call":
                at = {"item_id": item["id"], "output_index": index}
                events += [
                    {"type": "response.function_call_arguments.delta", **at, "delta": piece}
                    for piece in _chunks(item["arguments"], 8)
                ]
                events.append({"type": "response.function_call_arguments.done", **at, "name": item["name"],
                               "arguments": item["arguments"]})  # fmt: skip
            elif item["type"] == "reasoning":
                summary = item["summary"][0]["text"]
                at = {"item_id": item["id"], "output_index": index, "summary_index": 0}
                events.append({"type": "response.reasoning_summary_part.added", **at,
                               "part": {"type": "summary_text", "text": ""}})  # fmt: skip
                events.append({"type": "response.reasoning_summary_text.delta", **at, "delta": summary})
                events.append({"type": "response.reasoning_summary_text.done", **at, "text": summary})
                events.append({"type": "response.reasoning_summary_part.done", **at,
                               "part": {"type": "summary_text", "text": summary}})  # fmt: skip
            events.append({"type": "response.output_item.done", "output_index": index, "item": item})
        events.append({"type": "response.completed", "response": self._response(answer, "completed", items)})
        return [sse({**e, "sequence_number": n}, event=e["type"]) for n, e in enumerate(events)]
