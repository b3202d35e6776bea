"""The fake servers' fast HTTP path answers byte for byte as h11 does, and leaves to h11 what it does not read."""

from __future__ import annotations

import json
import socket

import pytest

from delta_eval.schema import Message
from delta_eval.testing.servers import http
from delta_eval.testing.servers.http import JSONReply, Reply, StreamReply
from delta_eval.testing.servers.openai import FakeOpenAIServer

PATH = "/v1/chat/completions"


def post(body: object, *, head: str = "", version: str = "1.1", host: bool = True, eol: str = "\r\n") -> bytes:
    data = json.dumps(body).encode()
    lines = [f"POST {PATH} HTTP/{version}", *(["host: 127.0.0.1"] if host else []), "content-type: application/json",
             f"content-length: {len(data)}", *([head] if head else [])]  # fmt: skip
    return (eol.join(lines) + eol + eol).encode() + data


def chat(text: str, **more: object) -> dict[str, object]:
    return {"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": text}], **more}


def chunked(body: object) -> bytes:
    data = json.dumps(body).encode()
    head = f"POST {PATH} HTTP/1.1\r\nhost: 127.0.0.1\r\ntransfer-encoding: chunked\r\n\r\n".encode()
    return head + b"%x\r\n" % len(data) + data + b"\r\n0\r\n\r\n"


#: Raw bytes a client sends on one connection (then it closes its side and reads all it gets back).
EXCHANGES = {
    "two requests, pipelined": post(chat("hi")) + post(chat("again")),
    "a refused request": post(chat("hi", temperature=0.5, reasoning_effort="high")),
    "a stream, then a plain request": post(chat("hi", stream=True)) + post(chat("after")),
    "a chunked body, then a plain request": chunked(chat("hi")) + post(chat("after")),
    "Expect: 100-continue": post(chat("hi"), head="expect: 100-continue"),
    "Connection: close": post(chat("hi"), head="connection: close") + post(chat("never read")),
    "Connection: keep-alive, Close": post(chat("hi"), head="connection: keep-alive, Close") + post(chat("unread")),
    "Connection: keep-alive": post(chat("hi"), head="connection: keep-alive") + post(chat("again")),
    "HTTP/1.0": post(chat("hi"), version="1.0"),
    "no Host": post(chat("hi"), host=False),
    "bare LF line ends": post(chat("hi"), eol="\n"),
    "a folded header": post(chat("hi"), head="x-a: 1\r\n  folded"),
    "a head over 16 KiB": post(chat("hi"), head="x-a: " + "a" * 17000),
    "a body cut short": post(chat("hi"))[:-5],
    "a GET": b"GET /v1/models HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n",
    "not HTTP": b"hello\r\n\r\n",
    "a request with a credential": post(chat("hi"), head="authorization: Bearer sk-test"),
}


def exchange(fast: bool, data: bytes, queued: tuple[Reply, ...] = ()) -> tuple[bytes, list[object]]:
    """What the server sends back, and the requests it logged (path, headers, body)."""
    server = FakeOpenAIServer(respond=lambda request: Message(role="assistant", content="a fixed answer"))
    server.fast_path = fast
    with server:
        server.enqueue(*queued)
        got = exchange_with(server, data)
    return got, [(r.method, r.path, r.query, r.headers, r.body, r.credentials) for r in server.requests]


def exchange_with(server: FakeOpenAIServer, data: bytes) -> bytes:
    """What a running server sends back to ``data`` on one connection (the client's side closed once sent)."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        got = b""
        while chunk := sock.recv(65536):
            got += chunk
    return got


@pytest.mark.parametrize("name", list(EXCHANGES))
def test_the_fast_path_answers_as_h11_does(name: str) -> None:
    fast, slow = exchange(True, EXCHANGES[name]), exchange(False, EXCHANGES[name])
    assert fast == slow


def test_the_fast_path_reads_and_writes_plain_requests_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_h11(*args: object) -> None:
        raise AssertionError("h11 was used")

    monkeypatch.setattr(http.h11, "Connection", no_h11)
    plain = ("two requests, pipelined", "a request with a credential", "Connection: keep-alive",
             "a stream, then a plain request")  # fmt: skip
    got, requests = exchange(True, b"".join(EXCHANGES[name] for name in plain))
    assert got.count(b"HTTP/1.1 200 \r\n") == 7
    assert b"Transfer-Encoding: chunked" in got
    assert len(requests) == 7


def test_queued_replies_with_headers_h11_has_rules_for_are_written_by_h11() -> None:
    queued = (JSONReply({"a": 1}, headers={"connection": "close"}), JSONReply({"b": 2}, status=418))
    data = post(chat("hi")) + post(chat("again"))
    assert exchange(True, data, queued) == exchange(False, data, queued)
    assert exchange(True, data, queued)[0].count(b"HTTP/1.1") == 1  # closed after the first, as h11 does


@pytest.mark.parametrize(
    "reply",
    [
        StreamReply([b"data: 1\n\n", b"", b"data: 2\n\n"], headers={"x-request-id": "r1"}),
        StreamReply([b"frame-1", b"frame-2"], headers={"Content-Type": "application/vnd.amazon.eventstream"}),
        StreamReply([b"data: 1\n\n", b"data: 2\n\n"], drop=True),  # the connection ends mid-stream
        StreamReply([b"data: {}\n\n"], status=500),
        JSONReply({"error": "x"}, status=429, headers={"retry-after": "1", "X-Custom": "a b"}),
        JSONReply({"a": 1}, headers={"x-bad": " leading space"}),  # h11 refuses it: the connection fails
    ],
)
def test_queued_replies_are_written_as_h11_writes_them(reply: Reply) -> None:
    data = post(chat("hi")) + post(chat("again"))
    assert exchange(True, data, (reply,)) == exchange(False, data, (reply,))


@pytest.mark.parametrize("fast", [True, False])
def test_a_client_that_leaves_a_stream_is_no_error_of_the_server(fast: bool) -> None:
    """A client gone mid-stream (closed, or reset), as a client's timeout leaves one: the server's loop reports
    nothing (uvloop raises where the write finds the connection closed; asyncio's dropped the write) and serves on."""
    import time

    server = FakeOpenAIServer()
    server.fast_path = fast
    reports: list[dict[str, object]] = []
    with server:
        assert server._loop is not None
        server._loop.call_soon_threadsafe(server._loop.set_exception_handler, lambda loop, ctx: reports.append(ctx))
        for reset in (False, True):
            server.enqueue(StreamReply([b"data: %d\n\n" % i for i in range(4)], delay_s=0.1))
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            sock.sendall(post(chat("hi", stream=True)))
            assert sock.recv(4096).startswith(b"HTTP/1.1 200")
            if reset:  # an RST, not a FIN
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            sock.close()
        time.sleep(0.6)  # the rest of each stream written to a connection that is gone
        got = exchange_with(server, post(chat("after")))
    assert reports == []
    assert got.startswith(b"HTTP/1.1 200")


def test_a_reply_echoing_what_only_json_reads_is_written_as_json_writes_it() -> None:
    """A request body holding a lone surrogate (which ``parse_json`` reads, as ``json.loads`` does) whose reply
    echoes it (the Responses API echoes ``metadata``): answered, the surrogate escaped, as before msgspec wrote
    replies."""
    body = b'{"model": "gpt-4.1", "input": "hi", "metadata": {"k": "\\ud800"}}'
    head = (f"POST /v1/responses HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n\r\n").encode()  # fmt: skip
    with FakeOpenAIServer() as server:
        got = exchange_with(server, head + body)
    assert got.startswith(b"HTTP/1.1 200")
    assert json.loads(got.split(b"\r\n\r\n", 1)[1])["metadata"] == {"k": "\ud800"}
    assert http.reply_json({"k": "\ud800", True: 1}) == b'{"k": "\\ud800", "true": 1}'
