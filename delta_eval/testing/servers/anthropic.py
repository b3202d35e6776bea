"""A fake Anthropic server: the Messages API (``POST /v1/messages``), JSON or a stream of named events; and the
same API as Vertex AI and Amazon Bedrock serve it (:mod:`.anthropic_platforms`: the model in the path, the
platform's ``anthropic_version`` in the body, Bedrock's streams in AWS event-stream frames); and the Message Batches
API (:mod:`.anthropic_batch`, :attr:`FakeAnthropicServer.batch`).

Like the real service it answers 400, in Anthropic's error shape, to: a request without ``max_tokens``; a thinking
budget not below ``max_tokens``; ``temperature``, ``top_p`` or ``top_k`` under API version 2026-10-21 (what the
current SDK sends); what the model's family refuses (:mod:`.model_rules`: a ``thinking`` type it does not take, a
budget under 1024, ``output_config.effort``, sampling parameters on adaptive-only models); a malformed ``image`` or
``document`` block (:mod:`.media`); a ``tool_use`` not
answered by a ``tool_result`` at the start of the next user message; and, when a model thinks, a later request of
the same turn whose ``thinking`` block is missing or altered. Errors of kind ``overloaded`` are Anthropic's 529.

Example:
    >>> import anthropic, anyio
    >>> async def ask(server: FakeAnthropicServer) -> str:
    ...     async with anthropic.AsyncAnthropic(base_url=server.url, api_key="sk-ant-test", max_retries=0) as client:
    ...         reply = await client.messages.create(
    ...             model="claude-sonnet-4-5", max_tokens=100, messages=[{"role": "user", "content": "hi"}])
    ...         return reply.content[0].text
    >>> with FakeAnthropicServer(respond=lambda request: Message(role="assistant", content="hello")) as server:
    ...     anyio.run(ask, server)
    'hello'
"""

from __future__ import annotations

import json
from typing import Any

from delta_eval.calls import GenerateParams, ModelRequest
from delta_eval.schema import Message, ToolCall, ToolSpec, Usage
from delta_eval.testing.servers import anthropic_platforms as platforms
from delta_eval.testing.servers.anthropic_batch import MessageBatchAPI
from delta_eval.testing.servers.decoded import DecodedParts, RequestFrames
from delta_eval.testing.servers.http import JSONReply, Reply, Request
from delta_eval.testing.servers.media import check_anthropic_block
from delta_eval.testing.servers.model_rules import check_anthropic
from delta_eval.testing.servers.prompt_cache import anthropic_blocks
from delta_eval.testing.servers.provider import Answer, FakeProviderServer, Route, WireError, schema_params, sign, sse

__all__ = ["FakeAnthropicServer"]

_THOUGHT = "The policy says to look the reservation up before acting."


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content or [] if isinstance(b, dict) and b.get("type") == "text")


class FakeAnthropicServer(FakeProviderServer):
    """Anthropic's Messages API, answered by the simulated model. ``url`` is the SDK's ``base_url``.

    Pass ``api_key`` to have requests without it (as ``x-api-key`` or a bearer token) refused with a 401.
    """

    def __init__(self, *args: Any, api_key: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.api_key = api_key
        self._signatures: dict[str, set[str]] = {}  # tool_use id -> signatures of the thinking issued with it
        # The canonical objects decoded from recent requests' parts (see .decoded), keyed with what they stand for.
        self._messages = DecodedParts[Message]()
        self._calls = DecodedParts[tuple[ToolCall, ...]]()
        self._tools = DecodedParts[tuple[ToolSpec, ...]](maxsize=256)
        self._formats = DecodedParts[GenerateParams](maxsize=256)
        self._frames = RequestFrames()
        #: The Message Batches endpoints; each request of a batch is answered by this server's own flow.
        self.batch = MessageBatchAPI(lambda asked: FakeProviderServer.handle(self, asked), self.error, lambda: self.url)

    def route(self, request: Request) -> Route | None:
        if request.method != "POST":
            return None
        platform = platforms.route(request)
        if platform is not None:
            return platform
        if request.path.rstrip("/") not in ("/v1/messages", "/messages"):
            return None
        body = request.data or {}
        return Route(str(body.get("model", "")), bool(body.get("stream")))

    async def handle(self, request: Request) -> Reply:
        route = self.route(request)
        if route is not None and route.api in platforms.VERSIONS:
            return await self._handle_platform(request, route)
        if self.api_key is not None and not (
            request.presented("x-api-key", self.api_key) or request.presented("authorization", f"Bearer {self.api_key}")
        ):
            return self.error(401, "auth", "invalid x-api-key")
        if self.batch.matches(request.path):
            return await self.batch.handle(request)
        return await super().handle(request)

    async def _handle_platform(self, request: Request, route: Route) -> Reply:
        # Vertex AI and Bedrock: their own credentials and body rules, then the Messages API as usual.
        reply: Reply
        if not platforms.authorised(request, route, self.api_key):
            reply = self.error(401, "auth", "Request had invalid authentication credentials.")
        else:
            problem = platforms.body_problem(request, route)
            reply = self.error(400, "bad_request", problem) if problem else await super().handle(request)
        if route.api == "bedrock":
            return platforms.as_bedrock(reply)
        return reply

    def error(
        self, status: int, kind: str, message: str, *, param: str | None = None, code: str | None = None
    ) -> JSONReply:
        types = {
            "rate_limit": "rate_limit_error",
            "server": "api_error",
            "overloaded": "overloaded_error",
            "not_found": "not_found_error",
            "auth": "authentication_error",
        }
        if kind == "overloaded":
            status = 529
        body = {"type": "error", "error": {"type": types.get(kind, "invalid_request_error"), "message": message},
                "request_id": f"req_err{len(self.requests)}"}  # fmt: skip
        return JSONReply(body, status=status, headers={"request-id": f"req_err{len(self.requests)}"})

    def decode(self, request: Request, route: Route) -> ModelRequest:
        body = request.data or {}
        if "max_tokens" not in body:
            raise WireError("max_tokens: Field required")
        if request.headers.get("anthropic-version", "") >= "2026-10-21":
            for field in ("temperature", "top_p", "top_k"):
                if field in body:
                    raise WireError(f"{field}: Extra inputs are not permitted")
        refusal = check_anthropic(route.model, body)
        if refusal is not None:
            raise WireError(refusal.message)
        thinking = body.get("thinking") or {}
        if thinking.get("type") == "enabled" and thinking.get("budget_tokens", 0) >= body["max_tokens"]:
            raise WireError("`max_tokens` must be greater than `thinking.budget_tokens`.")
        messages: list[Message] = []
        system = body.get("system")
        if system:
            messages.append(
                self._messages.get(("system", system), lambda: Message(role="system", content=_text(system)))
            )
        pending: list[str] = []
        for i, turn in enumerate(body.get("messages") or []):
            content = turn.get("content")
            blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
            for j, b in enumerate(blocks):
                check_anthropic_block(b, f"messages.{i}.content.{j}")
                if b.get("type") == "tool_result" and isinstance(b.get("content"), list):
                    for k, inner in enumerate(b["content"]):
                        check_anthropic_block(inner, f"messages.{i}.content.{j}.content.{k}", in_tool_result=True)
            if turn["role"] == "user":
                results = [b for b in blocks if b.get("type") == "tool_result"]
                leading = blocks[: len(results)]
                if pending and (leading != results or {b["tool_use_id"] for b in results} != set(pending)):
                    raise WireError(
                        f"messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately after: "
                        f"{', '.join(pending)}. Each `tool_use` block must have a corresponding `tool_result` block "
                        "in the next message."
                    )
                pending = []
                for b in results:
                    messages.append(self._tool_result(b))
                if len(blocks) > len(results):
                    messages.append(self._user(blocks[len(results) :]))
            else:
                calls = self._tool_uses(blocks)
                self._check_thinking(i, blocks, calls)
                pending = [c.id for c in calls]
                messages.append(self._assistant(blocks, calls))
        listed = body.get("tools") or []
        tools = self._tools.get(listed, lambda: tuple(
            ToolSpec(name=t["name"], description=t.get("description") or "", parameters=t.get("input_schema") or {})
            for t in listed
        ))  # fmt: skip
        fmt = (body.get("output_config") or {}).get("format") or {}
        if fmt and (fmt.get("type") != "json_schema" or not isinstance(fmt.get("schema"), dict)):
            raise WireError("output_config.format: expected {'type': 'json_schema', 'schema': {...}}")
        schema = fmt.get("schema")
        params = self._formats.get(schema, lambda: schema_params(schema))
        return self._frames.request(route.model, tuple(messages), tools, params)

    # The canonical message of each part, built once while an equal part is kept (see .decoded).

    def _user(self, blocks: list[dict[str, Any]]) -> Message:
        return self._messages.get(("user", blocks), lambda: Message(role="user", content=_text(blocks)))

    def _assistant(self, blocks: list[dict[str, Any]], calls: tuple[ToolCall, ...]) -> Message:
        # ``calls`` are the blocks' own (see _tool_uses): the message depends on the blocks alone.
        return self._messages.get(("assistant", blocks), lambda: Message(
            role="assistant", content=_text(blocks) or None, tool_calls=calls))  # fmt: skip

    def _tool_result(self, b: dict[str, Any]) -> Message:
        return self._messages.get(("tool", b), lambda: Message(
            role="tool", tool_call_id=b["tool_use_id"], content=_text(b["content"])))  # fmt: skip

    def _tool_uses(self, blocks: list[dict[str, Any]]) -> tuple[ToolCall, ...]:
        return self._calls.get(blocks, lambda: tuple(
            ToolCall(id=b["id"], name=b["name"], arguments=json.dumps(b.get("input", {})))
            for b in blocks
            if b.get("type") == "tool_use"
        ))  # fmt: skip

    def cache_usage(self, request: Request, canonical: ModelRequest, usage: Usage, ready_in_s: float) -> Usage:
        """Anthropic's explicit cache: prefixes up to the request's ``cache_control`` breakpoints."""
        assert self.prompt_cache is not None
        blocks = anthropic_blocks(request.data or {})
        return self.prompt_cache.anthropic(canonical.model, blocks, total=usage.input_tokens, ready_in_s=ready_in_s)

    def _check_thinking(self, index: int, blocks: list[dict[str, Any]], calls: tuple[ToolCall, ...]) -> None:
        for call in calls:
            issued = self._signatures.get(call.id)
            if not issued:
                continue
            sent = {b.get("signature") for b in blocks if b.get("type") == "thinking"}
            valid = {s for s in sent if s in issued}
            altered = [b for b in blocks if b.get("type") == "thinking" and b.get("signature") in valid
                       and b.get("thinking") != _THOUGHT]  # fmt: skip
            if not valid or altered:
                raise WireError(
                    f"messages.{index}.content.0: The `thinking` block that preceded `tool_use` {call.id} must be "
                    "passed back unmodified."
                )

    # -- answers --------------------------------------------------------------------------------------------

    def _blocks(self, answer: Answer) -> list[dict[str, Any]]:
        m = answer.message
        blocks: list[dict[str, Any]] = []
        if answer.thinking:
            signature = sign("thinking", answer.response_id, _THOUGHT)
            blocks.append({"type": "thinking", "thinking": _THOUGHT, "signature": signature})
            for call in m.tool_calls:
                self._signatures.setdefault(call.id, set()).add(signature)
        if m.content:
            blocks.append({"type": "text", "text": m.content})
        blocks += [
            {"type": "tool_use", "id": c.id, "name": c.name, "input": c.parsed_arguments or {}} for c in m.tool_calls
        ]
        return blocks

    @staticmethod
    def _usage(answer: Answer) -> dict[str, Any]:
        u = answer.usage
        return {
            "input_tokens": u.input_tokens - u.cached_input_tokens - u.cache_write_tokens,
            "output_tokens": u.output_tokens,
            "cache_creation_input_tokens": u.cache_write_tokens,
            "cache_read_input_tokens": u.cached_input_tokens,
            "output_tokens_details": {"thinking_tokens": u.reasoning_tokens},
        }

    def _message(self, answer: Answer, blocks: list[dict[str, Any]], stop: str | None) -> dict[str, Any]:
        return {
            "id": f"msg_{answer.response_id}",
            "type": "message",
            "role": "assistant",
            "model": answer.model,
            "content": blocks,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": self._usage(answer),
        }

    @staticmethod
    def _stop(answer: Answer) -> str:
        return "tool_use" if answer.message.tool_calls else "end_turn"

    def encode(self, answer: Answer) -> JSONReply:
        body = self._message(answer, self._blocks(answer), self._stop(answer))
        return JSONReply(body, headers={"request-id": f"req_{answer.response_id}"})

    def encode_stream(self, answer: Answer) -> list[bytes]:
        start = self._message(answer, [], None)
        start["usage"] = {**start["usage"], "output_tokens": 1}
        events: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
        for index, block in enumerate(self._blocks(answer)):
            if block["type"] == "text":
                opening: dict[str, Any] = {"type": "text", "text": ""}
                deltas = [{"type": "text_delta", "text": block["text"][i : i + 12]} for i in
                          range(0, len(block["text"]), 12)]  # fmt: skip
            elif block["type"] == "tool_use":
                opening = {**block, "input": {}}
                text = json.dumps(block["input"])
                deltas = [{"type": "input_json_delta", "partial_json": ""}]
                deltas += [
                    {"type": "input_json_delta", "partial_json": text[i : i + 8]} for i in range(0, len(text), 8)
                ]
            else:
                opening = {"type": "thinking", "thinking": "", "signature": ""}
                deltas = [{"type": "thinking_delta", "thinking": block["thinking"]},
                          {"type": "signature_delta", "signature": block["signature"]}]  # fmt: skip
            events.append({"type": "content_block_start", "index": index, "content_block": opening})
            events += [{"type": "content_block_delta", "index": index, "delta": d} for d in deltas]
            events.append({"type": "content_block_stop", "index": index})
        events.append({"type": "message_delta", "delta": {"stop_reason": self._stop(answer), "stop_sequence": None},
                       "usage": {"output_tokens": answer.usage.output_tokens}})  # fmt: skip
        events.append({"type": "message_stop"})
        if answer.route.api == "bedrock":
            return [platforms.event_frame(e) for e in events]
        return [sse(e, event=e["type"]) for e in events]
