"""What every fake provider server shares: a request in the provider's wire format is decoded into the canonical
form, the simulated model answers it (or fails as its behaviour says), and the answer goes back in the wire format.

The simulated model is :class:`~delta_eval.adapters.simulated.SimulatedAdapter`: it answers from recorded
conversations, and its seeded behaviours (rewording, skipped or changed tool calls, latency, 429 with Retry-After,
500, dropped streams, context-length errors, a true request limit with OpenAI's rate-limit headers) are drawn
exactly as for the ``simulated:`` model. Behaviours may differ per model name, so one server can stand in for a
baseline and a candidate model.

A model "thinks" when its behaviour reports reasoning tokens: the server then attaches the provider's reasoning
state (a Gemini thought signature, an Anthropic signed thinking block, a Responses reasoning item) and, like the real
provider, rejects a later request of the same turn that does not send it back unmodified.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
from abc import abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from delta_eval.adapters.recordings import RecordingIndex
from delta_eval.adapters.simulated import Failure, SimulatedAdapter, SimulatedBehaviour
from delta_eval.calls import FinishReason, GenerateParams, ModelRequest, ResponseFormat
from delta_eval.schema import Conversation, Message, Usage
from delta_eval.testing.servers.http import FakeHTTPServer, JSONReply, Reply, Request, StreamReply
from delta_eval.testing.servers.no_usage import strip_usage
from delta_eval.testing.servers.prompt_cache import PromptCache

__all__ = ["Answer", "FakeProviderServer", "Route", "WireError", "check_strict_schema", "schema_params", "sign", "sse"]

Responder = Callable[[ModelRequest], Message]


class WireError(Exception):
    """A request the real provider would reject with a 400 (the message says why; ``param`` and ``code`` are the
    fields OpenAI's error body carries, left out by providers without them)."""

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.param = param
        self.code = code


def schema_params(schema: Any, name: str = "response") -> GenerateParams:
    """The canonical parameters of a request that asked for JSON matching ``schema`` (none asked: the defaults), so
    the simulated model knows it is asked for a judge's answer (see :mod:`delta_eval.adapters.simulated_judge`)."""
    if not isinstance(schema, dict):
        return GenerateParams()
    return GenerateParams(response_format=ResponseFormat(name=name, json_schema=schema))


def check_strict_schema(schema: Any, name: str, context: tuple[str, ...] = ()) -> None:
    """Raise :class:`WireError` where OpenAI's strict structured outputs reject ``schema``: an object without
    ``additionalProperties: false``, or whose ``required`` does not list every property."""
    if not isinstance(schema, dict):
        return
    where = f"Invalid schema for response_format '{name}': In context={context}, "
    if schema.get("type") == "object" or "properties" in schema:
        if schema.get("additionalProperties") is not False:
            raise WireError(where + "'additionalProperties' is required to be supplied and to be false.")
        props = schema.get("properties") or {}
        missing = [key for key in props if key not in (schema.get("required") or [])]
        if missing:
            raise WireError(where + f"'required' is required to be supplied and to be an array including every key "
                            f"in properties. Missing '{missing[0]}'.")  # fmt: skip
        for key, sub in props.items():
            check_strict_schema(sub, name, (*context, "properties", key))
    if isinstance(schema.get("items"), dict):
        check_strict_schema(schema["items"], name, (*context, "items"))


def sign(*parts: str) -> str:
    """A signature the fake server can check later: base64 of a SHA-256 over ``parts`` and a server secret."""
    digest = hashlib.sha256("\x00".join(("fake-provider-secret", *parts)).encode()).digest()
    return base64.b64encode(digest[:24]).decode()


@dataclass(frozen=True)
class Route:
    """Where a request goes: the model it names, whether it asks for a stream, which of the server's APIs (or API
    version), and whether a stream should carry token usage (OpenAI's ``stream_options.include_usage``)."""

    model: str
    stream: bool = False
    api: str = ""
    include_usage: bool = True


@dataclass(frozen=True)
class Answer:
    """What the fake model answers one request with, before it is written in the wire format."""

    route: Route
    model: str
    message: Message
    usage: Usage
    finish: FinishReason
    thinking: bool
    response_id: str
    request: Request | None = None  # what was asked, for the fields a provider echoes back


class FakeProviderServer(FakeHTTPServer):
    """Base of the fake provider servers.

    - ``recordings``: the conversations the model answers from (conversations or a ready index);
    - ``behaviour``: one :class:`~delta_eval.adapters.simulated.SimulatedBehaviour` for every model, or a mapping
      from model name to behaviour (``"*"`` for the rest);
    - ``respond``: instead of the recordings, a function from the canonical request to the answer message;
    - ``usage``: ``False`` leaves token usage out of every reply, as a proxy that strips it does;
    - ``prompt_cache``: simulate the provider's prompt cache (:mod:`.prompt_cache`), unless a behaviour sets
      ``cached_fraction`` (then that fraction is reported, as by the ``simulated:`` model).
    """

    def __init__(
        self,
        recordings: RecordingIndex | Iterable[Conversation] | None = None,
        behaviour: SimulatedBehaviour | Mapping[str, SimulatedBehaviour] | None = None,
        respond: Responder | None = None,
        *,
        usage: bool = True,
        prompt_cache: bool = True,
    ) -> None:
        super().__init__()
        self.report_usage = usage
        self.prompt_cache = PromptCache() if prompt_cache else None
        if recordings is None or isinstance(recordings, RecordingIndex):
            self.recordings = recordings if recordings is not None else RecordingIndex()
        else:
            self.recordings = RecordingIndex()
            self.recordings.add(recordings)
        self.behaviours = (
            dict(behaviour) if isinstance(behaviour, Mapping) else {"*": behaviour or SimulatedBehaviour()}
        )
        self.respond = respond
        self._models: dict[str, SimulatedAdapter] = {}
        self._ids = itertools.count(1)

    def model(self, name: str) -> SimulatedAdapter:
        """The simulated model that answers as ``name``."""
        if name not in self._models:
            behaviour = self.behaviours.get(name, self.behaviours.get("*", SimulatedBehaviour()))
            self._models[name] = SimulatedAdapter(name, behaviour, self.recordings)
        return self._models[name]

    # -- what each provider's server defines ----------------------------------------------------------------

    @abstractmethod
    def route(self, request: Request) -> Route | None:
        """Where ``request`` goes; ``None`` when no endpoint matches."""

    @abstractmethod
    def decode(self, request: Request, route: Route) -> ModelRequest:
        """The canonical request; :class:`WireError` where the provider would answer 400."""

    @abstractmethod
    def encode(self, answer: Answer) -> JSONReply:
        """The answer as the provider's JSON response."""

    @abstractmethod
    def encode_stream(self, answer: Answer) -> list[bytes]:
        """The answer as the provider's stream of server-sent events, ending with its terminal event."""

    def cache_usage(self, request: Request, canonical: ModelRequest, usage: Usage, ready_in_s: float) -> Usage:
        """``usage`` with the prompt cache's reads and writes (see :mod:`.prompt_cache`); a provider's server
        says how its cache sees a request. By default: no cache."""
        return usage

    @abstractmethod
    def error(
        self, status: int, kind: str, message: str, *, param: str | None = None, code: str | None = None
    ) -> JSONReply:
        """An error response in the provider's shape. ``kind`` is ``rate_limit``, ``server``, ``bad_request``,
        ``context_length`` or ``not_found``; ``param`` and ``code`` fill the fields of that name where the provider's
        body has them (OpenAI)."""

    # -- the shared flow ------------------------------------------------------------------------------------

    async def handle(self, request: Request) -> Reply:
        reply = await self._answer(request)
        return reply if self.report_usage else strip_usage(reply)

    async def _answer(self, request: Request) -> Reply:
        route = self.route(request)
        if route is None:
            return self.error(404, "not_found", f"no endpoint {request.method} {request.path}")
        name = route.model
        try:
            canonical = self.decode(request, route)
        except WireError as exc:
            return self.error(400, "bad_request", str(exc), param=exc.param, code=exc.code)
        model = self.model(name)
        limit: dict[str, str] = {}
        if model.bucket is not None:
            admitted, limit = model.bucket.take()
            if not admitted:  # over the true request limit: refused at once, with the provider's headers
                refused = self.error(429, "rate_limit", "Rate limit reached for requests. Please try again later.")
                refused.headers.update(limit)
                return refused
        reply = await self._answer_drawn(request, route, canonical, model)
        reply.headers.update(limit)
        return reply

    async def _answer_drawn(
        self, request: Request, route: Route, canonical: ModelRequest, model: SimulatedAdapter
    ) -> Reply:
        name, stream = route.model, route.stream
        call = model.draw(canonical)
        message = self.respond(canonical) if self.respond is not None else call.message
        reply = self._failure(call.failure, model.behaviour)
        if reply is not None:
            reply.delay_s = call.latency_s
            return reply
        usage = call.usage
        if self.prompt_cache is not None and not model.behaviour.cached_fraction:
            cached = self.cache_usage(request, canonical, usage, call.latency_s)
            usage = usage.model_copy(update=cached.model_dump(include={"cached_input_tokens", "cache_write_tokens"}))
        answer = Answer(
            route=route,
            model=name,
            message=message,
            usage=usage,
            finish="tool_calls" if message.tool_calls else "stop",
            thinking=model.behaviour.reasoning_tokens > 0,
            response_id=f"{next(self._ids):06d}",
            request=request,
        )
        if not stream:
            json_reply = self.encode(answer)
            json_reply.delay_s = call.latency_s
            return json_reply
        events = self.encode_stream(answer)
        if call.failure == "dropped_stream":
            # Cut before the terminal event, as a dropped connection would.
            return StreamReply(events[: max(1, len(events) // 2)], first_delay_s=call.latency_s, drop=True)
        return StreamReply(events, first_delay_s=call.latency_s)

    def _failure(self, failure: Failure | None, behaviour: SimulatedBehaviour) -> JSONReply | None:
        if failure == "rate_limit":
            reply = self.error(429, "rate_limit", "Rate limit reached for requests. Please try again later.")
            wait = behaviour.retry_after_s
            reply.headers.update({"retry-after-ms": str(round(wait * 1000)), "retry-after": str(max(1, round(wait)))})
            return reply
        if failure == "server_error":
            return self.error(500, "server", "The server had an error while processing your request.")
        if failure == "context_length":
            return self.error(
                400,
                "context_length",
                f"This model's maximum context length is {behaviour.context_window} tokens; your messages are longer.",
            )
        return None


def sse(data: object, event: str | None = None) -> bytes:
    """One server-sent event, ``data:`` followed by a space (Gemini's SDK needs it), then a blank line."""
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()
