"""A small HTTP/1.1 server on 127.0.0.1 for fake providers: its own thread and event loop, keep-alive, chunked
streaming flushed event by event, and a log of every request.

The official SDKs talk to it unmodified over a real socket (they route through ``httpx2``, which HTTP-mocking
libraries do not see). A subclass answers requests in :meth:`FakeHTTPServer.handle`; a test may also queue exact
replies with :meth:`FakeHTTPServer.enqueue`, which are sent, in order, before the subclass is asked.

Example:
    >>> class Hello(FakeHTTPServer):
    ...     async def handle(self, request: Request) -> Reply:
    ...         return JSONReply({"hello": request.path})
    >>> import httpx
    >>> with Hello() as server:
    ...     httpx.get(server.url + "/world").json()
    {'hello': '/world'}
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from types import TracebackType
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit

import h11
import msgspec

__all__ = ["FakeHTTPServer", "JSONReply", "Reply", "Request", "StreamReply"]

#: Headers that carry credentials: the request log keeps that they were sent, never their value.
SECRET_HEADERS = frozenset({"authorization", "api-key", "x-api-key", "x-goog-api-key", "x-amz-security-token"})

#: Connections the kernel queues before the server's loop accepts them. asyncio's default (100) is less than the
#: calls a client opens at once at a high concurrency: on a loaded machine the loop accepts late, the queue fills,
#: and the kernel drops connection attempts, which a client with a short connect timeout sees as failures (the
#: kernel caps it at ``net.core.somaxconn``).
BACKLOG = 4096

_decode = msgspec.json.Decoder().decode


def parse_json(data: bytes) -> Any:
    """``json.loads(data)``, faster: msgspec parses what it accepts to the same values (the body of a fake server's
    every request is parsed, a large part of its CPU time); the rest (``NaN``, ``1e400``, lone surrogates, a byte
    order mark, invalid JSON) goes to ``json.loads``, so results and errors stay ``json.loads``'s."""
    try:
        return _decode(data)
    except msgspec.DecodeError:
        return json.loads(data)


@dataclass(frozen=True)
class Request:
    """One request as the server received it. Credential headers read ``<redacted>``; ``credentials`` keeps only a
    SHA-256 of each, so a server can check a key without the log ever holding one."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    credentials: dict[str, str] = field(default_factory=dict, repr=False)

    def presented(self, header: str, value: str) -> bool:
        """Whether credential ``header`` was sent with exactly ``value``."""
        return self.credentials.get(header.lower()) == hashlib.sha256(value.encode()).hexdigest()

    def json(self) -> Any:
        """The body parsed as JSON (``None`` when empty)."""
        return parse_json(self.body) if self.body else None

    @cached_property
    def data(self) -> Any:
        """The body parsed as JSON once (``None`` when empty), shared by every part of a server that reads it: read
        it, never change it (:meth:`json` gives a copy of one's own)."""
        return self.json()


@dataclass
class JSONReply:
    """A JSON response."""

    body: Any
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


@dataclass
class StreamReply:
    """A streamed response: each event (bytes already framed as the provider frames them) is flushed on its own.

    ``first_delay_s`` passes before the first event (what time-to-first-token measures) and ``delay_s`` before each
    later one. ``drop`` closes the connection after the last event instead of ending the response properly, as a
    network or a provider failing mid-stream would.
    """

    events: Sequence[bytes]
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    first_delay_s: float = 0.0
    delay_s: float = 0.0
    drop: bool = False


Reply = JSONReply | StreamReply


class FakeHTTPServer:
    """Base of the fake provider servers. Use as a context manager; nothing keeps running after it."""

    def __init__(self) -> None:
        self.requests: list[Request] = []
        self._queued: deque[Reply] = deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._ended = threading.Event()  # set by the server's thread once its loop has stopped
        self.port = 0

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.port}"

    def enqueue(self, *replies: Reply) -> None:
        """Send these replies, in order, to the next requests, before the server's own answers."""
        self._queued.extend(replies)

    async def handle(self, request: Request) -> Reply:
        """The reply to ``request`` (subclasses answer as their provider would)."""
        return JSONReply({"error": {"message": f"no route for {request.method} {request.path}"}}, status=404)

    # -- lifecycle --------------------------------------------------------------------------------------------

    def start(self, port: int = 0) -> Self:
        """Start serving on 127.0.0.1 (``port`` 0: any free port) in a thread of its own."""
        ready = threading.Event()
        failure: list[BaseException] = []
        loop = asyncio.new_event_loop()

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                serving = asyncio.start_server(self._serve, "127.0.0.1", port, backlog=BACKLOG)
                self._server = loop.run_until_complete(serving)
                self.port = self._server.sockets[0].getsockname()[1]
            except BaseException as exc:  # reported to start() below
                failure.append(exc)
                ready.set()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                self._ended.set()

        self._ended.clear()
        self._loop = loop
        self._thread = threading.Thread(target=run, name=f"{type(self).__name__}", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            self._thread.join()
            loop.close()
            raise failure[0]
        return self

    def stop(self) -> None:
        """Close every connection and the listening socket, and end the thread."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        # An event, not Thread.join: a Ctrl-C that landed in an earlier join can leave the thread looking stopped.
        self._ended.wait(timeout=10)
        thread.join(timeout=1)
        loop.close()
        self._loop = self._thread = None

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    def serve_forever_started(self) -> None:
        """Block until Ctrl-C (or SIGTERM's KeyboardInterrupt) while the started server serves from its thread."""
        try:
            while not self._ended.wait(timeout=0.5):
                pass
        except KeyboardInterrupt:
            pass

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- HTTP ---------------------------------------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        conn = h11.Connection(h11.SERVER)
        try:
            while True:
                request = await self._read(conn, reader)
                if request is None:
                    break
                self.requests.append(request)
                try:
                    reply = self._queued.popleft() if self._queued else await self.handle(request)
                finally:
                    # The log keeps every request; its parsed body (several times the bytes) only while answered.
                    request.__dict__.pop("data", None)
                if not await self._write(conn, writer, reply) or conn.our_state is h11.MUST_CLOSE:
                    break
                conn.start_next_cycle()
        except (ConnectionError, h11.RemoteProtocolError, asyncio.CancelledError):
            pass
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await writer.wait_closed()

    @staticmethod
    async def _read(conn: h11.Connection, reader: asyncio.StreamReader) -> Request | None:
        head: h11.Request | None = None
        body = bytearray()
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await reader.read(65536))
            elif isinstance(event, h11.Request):
                head = event
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                assert head is not None
                target = urlsplit(head.target.decode("latin-1"))
                headers: dict[str, str] = {}
                credentials: dict[str, str] = {}
                for name, value in head.headers:
                    key = name.decode("latin-1").lower()
                    if key in SECRET_HEADERS:
                        headers[key] = "<redacted>"
                        credentials[key] = hashlib.sha256(value).hexdigest()
                    else:
                        headers[key] = value.decode("latin-1")
                query = {k: v[-1] for k, v in parse_qs(target.query).items()}
                return Request(head.method.decode(), target.path, query, headers, bytes(body), credentials)
            else:  # ConnectionClosed, or PAUSED after a response the client never read
                return None

    @staticmethod
    async def _write(conn: h11.Connection, writer: asyncio.StreamWriter, reply: Reply) -> bool:
        """Send ``reply``; whether the connection may carry another request."""
        extra = [(k.encode(), v.encode()) for k, v in reply.headers.items()]
        if isinstance(reply, JSONReply):
            if reply.delay_s:
                await asyncio.sleep(reply.delay_s)
            data = json.dumps(reply.body).encode()
            head = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()), *extra]
            # One write (one send on the socket) for the whole response, not one per part.
            response = conn.send(h11.Response(status_code=reply.status, headers=head))
            writer.write(b"".join((response or b"", conn.send(h11.Data(data=data)) or b"",
                                   conn.send(h11.EndOfMessage()) or b"")))  # fmt: skip
            await writer.drain()
            return True
        # A reply may name its own content type (Bedrock streams AWS event-stream frames, not server-sent events).
        own_type = any(k.lower() == "content-type" for k in reply.headers)
        head = [*([] if own_type else [(b"content-type", b"text/event-stream")]), (b"cache-control", b"no-cache"),
                *extra]  # fmt: skip
        writer.write(conn.send(h11.Response(status_code=reply.status, headers=head)))
        await writer.drain()
        for k, event in enumerate(reply.events):
            delay = reply.first_delay_s if k == 0 else reply.delay_s
            if delay:
                await asyncio.sleep(delay)
            writer.write(conn.send(h11.Data(data=event)))
            await writer.drain()
        if reply.drop:
            writer.transport.abort()
            return False
        writer.write(conn.send(h11.EndOfMessage()))
        await writer.drain()
        return True
