"""A fake Gemini server: ``generateContent`` and ``streamGenerateContent?alt=sse`` under ``/v1/`` or ``/v1beta/``, and
the same methods at Vertex AI's publisher-model paths; and batch mode (:mod:`.gemini_batch`,
:attr:`FakeGeminiServer.batch`).

It reads requests as the Gemini API does, including the snake_case keys ``google-genai`` leaves in objects it passes
through whole (``thinking_budget``, ``parameters_json_schema``), but never inside function arguments, responses or
property names. Like the real service it answers 400, in Google's error shape, to: ``systemInstruction``, ``tools``,
``toolConfig``, ``thinkingConfig`` or a response schema on a ``/v1/`` path (they exist on ``/v1beta/``); a
``thinkingConfig`` the model's family refuses (:mod:`.model_rules`: a level before Gemini 3, a budget out of range,
budget and level together, any thinking on 2.0 Flash); a role other than ``user`` and ``model``; a part holding
two kinds of data, or malformed ``inlineData`` / ``fileData`` (:mod:`.media`); a function call not
answered by function responses in the next turn; and, when a model thinks, a later request whose function call of
the current turn (after the user's last message) comes back without the ``thoughtSignature`` it was given. Rate
limits come with a ``google.rpc.RetryInfo`` detail.

Example:
    >>> from google import genai
    >>> from google.genai import types
    >>> import anyio
    >>> async def ask(server: FakeGeminiServer) -> str | None:
    ...     client = genai.Client(api_key="test", http_options=types.HttpOptions(base_url=server.url))
    ...     try:
    ...         reply = await client.aio.models.generate_content(model="gemini-2.5-flash", contents="hi")
    ...         return reply.text
    ...     finally:
    ...         await client.aio.aclose()
    >>> with FakeGeminiServer(respond=lambda request: Message(role="assistant", content="hello")) as server:
    ...     anyio.run(ask, server)
    'hello'
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

from delta_eval.calls import GenerateParams, ModelRequest
from delta_eval.schema import Message, ToolCall, ToolSpec, Usage
from delta_eval.testing.servers.decoded import DecodedParts, RequestFrames
from delta_eval.testing.servers.gemini_batch import GeminiBatchAPI
from delta_eval.testing.servers.http import JSONReply, Reply, Request
from delta_eval.testing.servers.media import check_gemini_part
from delta_eval.testing.servers.model_rules import check_gemini, check_gemini_version
from delta_eval.testing.servers.prompt_cache import request_blocks
from delta_eval.testing.servers.provider import Answer, FakeProviderServer, Route, WireError, schema_params, sign, sse

__all__ = ["FakeGeminiServer"]

_PATH = re.compile(
    r"^/(?P<version>v1|v1beta|v1alpha)/models/(?P<model>[^:/]+):(?P<method>generateContent|streamGenerateContent)$"
)
# Vertex AI: a project's regional publisher model, or (express mode, an API key) the publisher model alone.
_VERTEX_PATH = re.compile(
    r"^/(?:v1|v1beta1)/(?:projects/(?P<project>[^/]+)/locations/(?P<location>[^/]+)/)?publishers/google/"
    r"models/(?P<model>[^:/]+):(?P<method>generateContent|streamGenerateContent)$"
)
_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
           429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE"}  # fmt: skip
# Keys whose values are the user's own data, never renamed.
_OPAQUE = frozenset({"args", "response", "properties", "parametersJsonSchema", "responseJsonSchema"})
_THOUGHT = "Checking the policy before calling the tool."


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(word[:1].upper() + word[1:] for word in rest)


def normalise(value: Any) -> Any:
    """Snake_case keys camel-cased, as the API's parser accepts both, except inside user data."""
    if isinstance(value, list):
        return [normalise(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for key, sub in value.items():
        name = _camel(key)
        out[name] = sub if name in _OPAQUE else normalise(sub)
    return out


def _signature_bytes(value: Any) -> bytes | None:
    # The SDK holds signatures as bytes and may send them in either base64 alphabet: compare what they encode.
    if not isinstance(value, str):
        return None
    try:
        return base64.b64decode(value.replace("-", "+").replace("_", "/") + "=" * (-len(value) % 4))
    except ValueError:
        return None


def _call_key(name: str, args: Any) -> str:
    return json.dumps([name, args], sort_keys=True)


class FakeGeminiServer(FakeProviderServer):
    """The Gemini API's ``generateContent``, answered by the simulated model. ``url`` is the SDK's ``base_url``.

    Pass ``api_key`` to have requests without it (``x-goog-api-key``) refused with a 401-like 400, as Google does.
    Vertex AI paths (``/v1beta1/projects/{p}/locations/{l}/publishers/google/models/{m}:generateContent``, and
    ``/v1beta1/publishers/google/models/{m}:...`` in express mode) are answered too; pass ``access_token`` to have
    project requests without ``Authorization: Bearer <token>`` refused with a 401.
    """

    def __init__(self, *args: Any, api_key: str | None = None, access_token: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.api_key = api_key
        self.access_token = access_token
        self._signatures: dict[str, set[bytes | None]] = {}  # a call (name, args) -> the signatures issued with it
        # What recent requests' parts were decoded to (see .decoded), keyed with what they stand for.
        self._normalised = DecodedParts[Any]()
        self._messages = DecodedParts[Message]()
        self._tools = DecodedParts[tuple[ToolSpec, ...]](maxsize=256)
        self._formats = DecodedParts[GenerateParams](maxsize=256)
        self._frames = RequestFrames()
        #: The batch endpoints; each inline request is answered by this server's own flow.
        self.batch = GeminiBatchAPI(lambda asked: FakeProviderServer.handle(self, asked), self.error)

    def route(self, request: Request) -> Route | None:
        match = _PATH.match(request.path)
        vertex = _VERTEX_PATH.match(request.path)
        if request.method != "POST" or (match or vertex) is None:
            return None
        if vertex is not None:
            return Route(vertex.group("model"), vertex.group("method") == "streamGenerateContent", "vertex")
        assert match is not None
        return Route(match.group("model"), match.group("method") == "streamGenerateContent", match.group("version"))

    async def handle(self, request: Request) -> Reply:
        if self.access_token is not None and _VERTEX_PATH.match(request.path) and "/projects/" in request.path:
            # Vertex AI with a project: an OAuth bearer token, never a key.
            if not request.presented("authorization", f"Bearer {self.access_token}"):
                return self.error(401, "auth", "Request had invalid authentication credentials.")
            return await super().handle(request)
        if self.api_key is not None and not request.presented("x-goog-api-key", self.api_key):
            return self.error(400, "auth", "API key not valid. Please pass a valid API key.")
        if self.batch.matches(request.path):
            return await self.batch.handle(request)
        return await super().handle(request)

    def error(
        self, status: int, kind: str, message: str, *, param: str | None = None, code: str | None = None
    ) -> JSONReply:
        body: dict[str, Any] = {"error": {"code": status, "message": message, "status": _STATUS.get(status, "UNKNOWN")}}
        return JSONReply(body, status=status)

    def _failure(self, failure: Any, behaviour: Any) -> JSONReply | None:
        reply = super()._failure(failure, behaviour)
        if reply is not None and reply.status == 429:
            # Gemini says the wait in the body, not in a header.
            reply.headers.clear()
            delay = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": f"{behaviour.retry_after_s}s"}
            reply.body["error"]["details"] = [delay]
        return reply

    def cache_usage(self, request: Request, canonical: ModelRequest, usage: Usage, ready_in_s: float) -> Usage:
        """The implicit prompt cache: the longest prefix of the conversation seen before."""
        assert self.prompt_cache is not None
        blocks = request_blocks(canonical)
        return self.prompt_cache.gemini(canonical.model, blocks, total=usage.input_tokens, ready_in_s=ready_in_s)

    def decode(self, request: Request, route: Route) -> ModelRequest:
        raw = request.data or {}
        refusal = check_gemini_version(route.api, raw)
        body = self._normalise(raw)
        refusal = refusal or check_gemini(route.model, body)
        if refusal is not None:
            raise WireError(refusal.message)
        messages: list[Message] = []
        system = body.get("systemInstruction")
        if system:
            messages.append(self._messages.get(("system", system), lambda: Message(
                role="system", content="".join(p.get("text", "") for p in system.get("parts", [])))))  # fmt: skip
        open_calls: list[ToolCall] = []
        contents = body.get("contents") or []
        # Signatures are checked in the current turn only: the calls after the last message the user wrote.
        current = max((i for i, c in enumerate(contents) if c.get("role") == "user" and any(
            "text" in p for p in c.get("parts") or [])), default=-1)  # fmt: skip
        for i, content in enumerate(contents):
            role, parts = content.get("role", "user"), content.get("parts") or []
            for j, part in enumerate(parts):
                check_gemini_part(part, f"contents[{i}].parts[{j}]")
            if role not in ("user", "model"):
                raise WireError(f"Please use a valid role: user, model. (contents[{i}].role = {role!r})")
            responses = [p["functionResponse"] for p in parts if "functionResponse" in p]
            if open_calls and (role != "user" or len(responses) != len(open_calls)):
                raise WireError(
                    "Please ensure that function response turn comes immediately after a function call turn, "
                    "with one function response for each function call."
                )
            if role == "model":
                if i > current:
                    self._check_signatures(i, parts)
                message = self._model_turn(i, parts)
                open_calls = list(message.tool_calls)
                messages.append(message)
            else:
                for call, response in zip(open_calls, responses, strict=False):
                    messages.append(self._function_response(call.id, response))
                open_calls = []
                text = "".join(p.get("text", "") for p in parts if "text" in p)
                if text or not responses:
                    messages.append(self._user(text))
        listed = body.get("tools") or []
        tools = self._tools.get(listed, lambda: tuple(
            ToolSpec(name=d["name"], description=d.get("description") or "",
                     parameters=d.get("parametersJsonSchema") or d.get("parameters") or {})
            for tool in listed
            for d in tool.get("functionDeclarations") or []
        ))  # fmt: skip
        config = body.get("generationConfig") or {}
        schema = config.get("responseJsonSchema") or config.get("responseSchema")
        if schema is not None and config.get("responseMimeType") != "application/json":
            raise WireError("responseMimeType must be application/json when a response schema is set.")
        params = self._formats.get(schema, lambda: schema_params(schema))
        return self._frames.request(route.model, tuple(messages), tools, params)

    def _normalise(self, raw: Any) -> Any:
        # normalise(raw), each turn and each other top-level value normalised once while an equal one is kept.
        if not isinstance(raw, dict):
            return normalise(raw)
        out: dict[str, Any] = {}
        for key, sub in raw.items():
            name = _camel(key)
            if name in _OPAQUE or not isinstance(sub, dict | list):
                out[name] = sub if name in _OPAQUE else normalise(sub)
            elif name == "contents" and isinstance(sub, list):
                out[name] = [self._normalised_part(c) for c in sub]
            else:
                out[name] = self._normalised_part(sub)
        return out

    def _normalised_part(self, part: Any) -> Any:
        return self._normalised.get(part, lambda: normalise(part))

    def _model_turn(self, index: int, parts: list[dict[str, Any]]) -> Message:
        # A call without an id is named by its turn's index: the index is part of the key.
        def build() -> Message:
            calls = [p for p in parts if "functionCall" in p]
            tool_calls = tuple(
                ToolCall(id=c["functionCall"].get("id") or f"g{index}_{k}", name=c["functionCall"]["name"],
                         arguments=json.dumps(c["functionCall"].get("args", {})))
                for k, c in enumerate(calls)
            )  # fmt: skip
            text = "".join(p.get("text", "") for p in parts if not p.get("thought"))
            return Message(role="assistant", content=text or None, tool_calls=tool_calls)

        return self._messages.get(("model", index, parts), build)

    def _user(self, text: str) -> Message:
        return self._messages.get(("user", text), lambda: Message(role="user", content=text))

    def _function_response(self, call_id: str, response: dict[str, Any]) -> Message:
        def build() -> Message:
            output = response.get("response", {})
            content_text = output.get("output") if isinstance(output, dict) else None
            text = content_text if isinstance(content_text, str) else json.dumps(output)
            return Message(role="tool", tool_call_id=call_id, name=response.get("name"), content=text)

        return self._messages.get(("tool", call_id, response), build)

    def _check_signatures(self, index: int, parts: list[dict[str, Any]]) -> None:
        first_call = next((p for p in parts if "functionCall" in p), None)
        if first_call is None:
            return
        call = first_call["functionCall"]
        issued = self._signatures.get(_call_key(call["name"], call.get("args", {})))
        if issued and _signature_bytes(first_call.get("thoughtSignature")) not in issued:
            raise WireError(
                f"Function call is missing a thought_signature in functionCall parts. This is required for tools to "
                f"work correctly, and missing thought_signature may lead to degraded model performance. "
                f"(contents[{index}].parts)"
            )

    # -- answers --------------------------------------------------------------------------------------------

    def _parts(self, answer: Answer) -> list[dict[str, Any]]:
        m = answer.message
        parts: list[dict[str, Any]] = []
        if answer.thinking:
            parts.append({"text": _THOUGHT, "thought": True})
        if m.content:
            parts.append({"text": m.content})
        for k, call in enumerate(m.tool_calls):
            args = call.parsed_arguments if isinstance(call.parsed_arguments, dict) else {}
            part: dict[str, Any] = {"functionCall": {"name": call.name, "args": args}}
            if answer.thinking and k == 0:  # only the first call of a turn carries the signature
                signature = sign("gemini", answer.response_id)
                part["thoughtSignature"] = signature
                self._signatures.setdefault(_call_key(call.name, args), set()).add(_signature_bytes(signature))
            parts.append(part)
        return parts

    @staticmethod
    def _usage(answer: Answer) -> dict[str, Any]:
        u = answer.usage
        return {
            "promptTokenCount": u.input_tokens,
            "cachedContentTokenCount": u.cached_input_tokens,
            "candidatesTokenCount": u.output_tokens - u.reasoning_tokens,
            "thoughtsTokenCount": u.reasoning_tokens,
            "totalTokenCount": u.input_tokens + u.output_tokens,
        }

    def _response(self, answer: Answer, parts: list[dict[str, Any]], finish: bool) -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
        if finish:
            candidate["finishReason"] = "STOP"
        body: dict[str, Any] = {"candidates": [candidate], "modelVersion": answer.model,
                                "responseId": f"r{answer.response_id}"}  # fmt: skip
        if finish:
            body["usageMetadata"] = self._usage(answer)
        return body

    def encode(self, answer: Answer) -> JSONReply:
        return JSONReply(self._response(answer, self._parts(answer), finish=True))

    def encode_stream(self, answer: Answer) -> list[bytes]:
        parts = self._parts(answer)
        events = [self._response(answer, [part], finish=False) for part in parts[:-1]]
        for event in events:
            # Gemini puts usageMetadata on every chunk: the prompt count early, the totals on the last chunk.
            prompt = answer.usage.input_tokens
            event["usageMetadata"] = {"promptTokenCount": prompt, "totalTokenCount": prompt}
        events.append(self._response(answer, parts[-1:], finish=True))
        return [sse(e).replace(b"\n\n", b"\r\n\r\n") for e in events]
