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
import re
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from types import TracebackType
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit

import h11
import msgspec

from delta_eval.sync import new_event_loop

__all__ = ["FakeHTTPServer", "JSONReply", "Reply", "Request", "StreamReply", "reply_json", "while_set"]

#: Headers that carry credentials: the request log keeps that they were sent, never their value.
SECRET_HEADERS = frozenset({"authorization", "api-key", "x-api-key", "x-goog-api-key", "x-amz-security-token"})

#: Connections the kernel queues before the server's loop accepts them. asyncio's default (100) is less than the
#: calls a client opens at once at a high concurrency: on a loaded machine the loop accepts late, the queue fills,
#: and the kernel drops connection attempts, which a client with a short connect timeout sees as failures (the
#: kernel caps it at ``net.core.somaxconn``).
BACKLOG = 4096

_decode = msgspec.json.Decoder().decode

# The plain requests and replies the fast path reads and writes (see FakeHTTPServer._serve), in h11's grammar.
_TOKEN = rb"[-!#$%&'*+.^_`|~0-9a-zA-Z]+"
_FIELD_VALUE = rb"(?:[^\x00\s]+(?:[ \t]+[^\x00\s]+)*)?"
_REQUEST_LINE = re.compile(rb"(%s) ([\x21-\x7e]+) HTTP/1\.1" % _TOKEN)
_HEADER_LINE = re.compile(rb"(%s):[ \t]*(%s)[ \t]*" % (_TOKEN, _FIELD_VALUE))
_NAME, _VALUE = re.compile(_TOKEN), re.compile(_FIELD_VALUE)
_BLANK_LINE = re.compile(rb"\n\r?\n")  # where h11 ends a head (it takes bare LF line ends too)
#: Headers h11 has rules for beyond a plain request (framing, expectations, protocol switches) or reply (framing,
#: connection management), and methods whose replies have no body: left to h11.
_H11_REQUEST_HEADERS = frozenset({b"transfer-encoding", b"expect", b"upgrade"})
_H11_REPLY_HEADERS = frozenset({b"content-length", b"transfer-encoding", b"connection"})
_H11_METHODS = frozenset({b"HEAD", b"CONNECT"})
_MAX_HEAD = 16 * 1024  # h11's limit on a request's head


class _ToH11:
    """What the fast path reads from a request it leaves to h11."""


_TO_H11 = _ToH11()


async def while_set(flag: Callable[[], bool]) -> None:
    """Wait while ``flag()`` holds: a test's switch, set from its own thread (an event of the server's loop could
    not be), such as a batch API's ``stall_create``."""
    while flag():  # noqa: ASYNC110
        await asyncio.sleep(0.01)


_encode = msgspec.json.Encoder().encode


def reply_json(body: Any) -> bytes:
    r"""A JSON reply's bytes, as the providers send them: compact, UTF-8. msgspec writes them in a tenth of
    ``json.dumps``' time (a fake server writes every reply); what it refuses is written by ``json.dumps`` (a lone
    surrogate that a request's body parsed to and a reply echoes, a key that is not a string). A non-finite float is
    written ``null`` (no provider sends ``NaN``, which is no JSON).

    Example:
        >>> reply_json({"content": "é", "n": [1, 2.5, None]})
        b'{"content":"\xc3\xa9","n":[1,2.5,null]}'
    """
    try:
        return _encode(body)
    except (TypeError, UnicodeEncodeError, msgspec.EncodeError):
        return json.dumps(body).encode()


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

    #: Read plain requests and write plain replies (JSON or streamed) without h11, which cost a fake server about a
    #: seventh of its CPU time, byte for byte as h11 does; anything else on a connection (a chunked body, ``Expect``,
    #: ``Connection: close``, HTTP/1.0, ``HEAD``, a malformed request, a reply header h11 has rules for) hands it to
    #: h11 from that request on. ``False``: every connection through h11 from the start (what the fast path is
    #: checked against).
    fast_path = True

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
        loop = new_event_loop()

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
        conn = None if self.fast_path else h11.Connection(h11.SERVER)
        buffer = bytearray()  # what the fast path has read and not yet consumed
        raw = b""  # the bytes of the request the fast path read last
        try:
            while True:
                if conn is None:
                    got = await self._read_fast(reader, buffer)
                    if got is None:
                        break
                    if isinstance(got, _ToH11):
                        conn = self._to_h11(bytes(buffer))
                        buffer.clear()
                        continue
                    request, raw = got
                else:
                    parsed = await self._read(conn, reader)
                    if parsed is None:
                        break
                    request = parsed
                self.requests.append(request)
                try:
                    reply = self._queued.popleft() if self._queued else await self.handle(request)
                finally:
                    # The log keeps every request; its parsed body (several times the bytes) only while answered.
                    request.__dict__.pop("data", None)
                if conn is None:
                    lines = _fast_head(reply)
                    if lines is not None:
                        if not await self._write_fast(writer, reply, lines):
                            break
                        continue
                    # A reply for h11 to write: h11 reads the request again, then serves the connection.
                    conn = self._to_h11(raw)
                    while not isinstance(event := conn.next_event(), h11.EndOfMessage):
                        if event is h11.NEED_DATA:  # cannot be: the fast path read a whole request
                            raise h11.RemoteProtocolError("request cut short", error_status_hint=400)
                    if buffer:
                        conn.receive_data(bytes(buffer))
                        buffer.clear()
                if not await self._write(conn, writer, reply) or conn.our_state is h11.MUST_CLOSE:
                    break
                conn.start_next_cycle()
        except (ConnectionError, h11.RemoteProtocolError, asyncio.CancelledError):
            pass
        except RuntimeError:
            # uvloop raises RuntimeError ("the handler is closed") on a write to a transport the peer reset, where
            # asyncio's drops the write: the peer is gone either way.
            if not writer.transport.is_closing():
                raise
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await writer.wait_closed()

    @staticmethod
    def _to_h11(data: bytes) -> h11.Connection:
        """An h11 connection that has received ``data`` (a request's start: nothing of it consumed yet)."""
        conn = h11.Connection(h11.SERVER)
        if data:  # empty data would tell h11 the peer closed
            conn.receive_data(data)
        return conn

    @staticmethod
    async def _read_fast(reader: asyncio.StreamReader, buffer: bytearray) -> tuple[Request, bytes] | _ToH11 | None:
        """The next request and its bytes, ``None`` once the peer closed, or ``_TO_H11`` for a request that is not
        plain: then ``buffer`` holds all of it that was read."""
        while (blank := _BLANK_LINE.search(buffer)) is None:
            if len(buffer) > _MAX_HEAD or buffer[:2] == b"\r\n":
                return _TO_H11
            data = await reader.read(65536)
            if not data:  # closed: between requests, or in a head h11 would refuse
                return _TO_H11 if buffer else None
            buffer += data
        end = blank.start() - 1  # where CRLF CRLF starts, if the head ends so
        if buffer[end : blank.end()] != b"\r\n\r\n" or end + 4 > _MAX_HEAD or buffer[:2] == b"\r\n":
            return _TO_H11
        lines = bytes(buffer[:end]).split(b"\r\n")
        first = _REQUEST_LINE.fullmatch(lines[0])
        if first is None or first[1] in _H11_METHODS:
            return _TO_H11
        headers: dict[str, str] = {}
        credentials: dict[str, str] = {}
        length: int | None = None
        hosts = 0
        for line in lines[1:]:
            field = _HEADER_LINE.fullmatch(line)
            if field is None:
                return _TO_H11
            name, value = field[1].lower(), field[2]
            if name in _H11_REQUEST_HEADERS:
                return _TO_H11
            if name == b"connection" and b"close" in (token.strip().lower() for token in value.split(b",")):
                return (
                    _TO_H11  # the last request of the connection (``keep-alive``, what clients send, changes nothing)
                )
            if name == b"content-length":
                if length is not None or not value.isdigit() or len(value) > 20:
                    return _TO_H11
                length = int(value)
            hosts += name == b"host"
            key = name.decode("latin-1")
            if key in SECRET_HEADERS:
                headers[key] = "<redacted>"
                credentials[key] = hashlib.sha256(value).hexdigest()
            else:
                headers[key] = value.decode("latin-1")
        if hosts != 1:  # h11 refuses an HTTP/1.1 request without exactly one Host
            return _TO_H11
        start = end + 4
        stop = start + (length or 0)
        while len(buffer) < stop:
            data = await reader.read(65536)
            if not data:  # closed in the body: no request (h11 fails the connection the same way)
                return None
            buffer += data
        raw, body = bytes(buffer[:stop]), bytes(buffer[start:stop])
        del buffer[:stop]
        target = urlsplit(first[2].decode("latin-1"))
        query = {k: v[-1] for k, v in parse_qs(target.query).items()}
        return Request(first[1].decode(), target.path, query, headers, body, credentials), raw

    @staticmethod
    async def _write_fast(writer: asyncio.StreamWriter, reply: Reply, lines: list[bytes]) -> bool:
        """Send a plain reply (see :func:`_fast_head`) as h11 would (as :meth:`_write` does through h11): a JSON
        reply in one write, a stream with each event flushed; whether the connection may carry another request."""
        if isinstance(reply, JSONReply):
            if reply.delay_s:
                await asyncio.sleep(reply.delay_s)
            data = reply_json(reply.body)
            head = b"HTTP/1.1 %d \r\ncontent-type: application/json\r\ncontent-length: %d\r\n" % (
                reply.status,
                len(data),
            )
            writer.write(b"".join((head, *lines, b"\r\n", data)))
            await writer.drain()
            return True
        own_type = any(k.lower() == "content-type" for k in reply.headers)
        # h11 frames a body of unknown length in chunks, and names that last among the headers.
        start = [b"HTTP/1.1 %d \r\n" % reply.status, *([] if own_type else [b"content-type: text/event-stream\r\n"]),
                 b"cache-control: no-cache\r\n", *lines, b"Transfer-Encoding: chunked\r\n\r\n"]  # fmt: skip
        writer.write(b"".join(start))
        await writer.drain()
        for k, event in enumerate(reply.events):
            delay = reply.first_delay_s if k == 0 else reply.delay_s
            if delay:
                await asyncio.sleep(delay)
            if event:  # an empty chunk would end the body
                writer.write(b"%x\r\n%s\r\n" % (len(event), event))
            await writer.drain()
        if reply.drop:
            writer.transport.abort()
            return False
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True

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
            data = reply_json(reply.body)
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


def _fast_head(reply: Reply) -> list[bytes] | None:
    """The extra header lines of a reply the fast path writes as h11 would, or ``None`` for a reply left to h11 (a
    status without a body, a header h11 has rules for or would refuse, an event that is not bytes)."""
    if type(reply.status) is not int or not 200 <= reply.status < 600:
        return None
    if isinstance(reply, StreamReply) and not all(type(event) is bytes for event in reply.events):
        return None
    if reply.status in (204, 304):
        return None
    lines = []
    for k, v in reply.headers.items():
        name, value = k.encode(), v.encode()
        if name.lower() in _H11_REPLY_HEADERS:
            return None
        if _NAME.fullmatch(name) is None or _VALUE.fullmatch(value) is None:
            return None
        lines.append(b"%s: %s\r\n" % (name, value))
    return lines
