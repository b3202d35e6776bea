"""Serving the viewer: :func:`serve` until Ctrl-C (``delta-eval view``), or :class:`Server` in a background thread
(notebooks, the browser tests), on 127.0.0.1 only.

Example::

    with Server(["runs/demo"], user="ana") as server:   # a free port
        print(server.url)                                 # http://127.0.0.1:PORT
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

import uvicorn

from delta_eval.viewer.app import create_app
from delta_eval.viewer.queries import RunView

__all__ = ["HOST", "Server", "serve"]

#: The viewer listens on this machine's loopback only: it shows production conversations.
HOST = "127.0.0.1"


def _config(runs: Sequence[str | Path | RunView], user: str, port: int) -> uvicorn.Config:
    # No access log: a page view is not news, and the URLs hold what people searched for.
    return uvicorn.Config(create_app(runs, user=user), host=HOST, port=port, log_level="warning", access_log=False)


def serve(runs: Sequence[str | Path | RunView], *, user: str, port: int = 8765) -> None:
    """Serve the viewer of ``runs`` on 127.0.0.1:``port`` until interrupted."""
    uvicorn.Server(_config(runs, user, port)).run()


class Server:
    """The viewer served from a background thread; a context manager that stops it on exit."""

    def __init__(self, runs: Sequence[str | Path | RunView], *, user: str, port: int | None = None) -> None:
        # Without a port, the socket is bound here and handed to uvicorn: a port found free, then bound by uvicorn
        # later, may be taken meanwhile by another process doing the same (tests on several workers).
        self._socket: socket.socket | None = None
        if not port:
            self._socket = socket.socket()
            self._socket.bind((HOST, 0))
            port = int(self._socket.getsockname()[1])
        self.port = port
        self.url = f"http://{HOST}:{self.port}"
        self._server = uvicorn.Server(_config(runs, user, self.port))
        sockets = [self._socket] if self._socket is not None else None
        # uvicorn leaves signal handlers alone outside the main thread: Ctrl-C stays the caller's
        self._thread = threading.Thread(target=self._server.run, args=(sockets,), name="delta-eval-viewer",
                                        daemon=True)  # fmt: skip

    def start(self, timeout: float = 20.0) -> Server:
        """Start serving; returns once the server listens."""
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the viewer did not start on {self.url}")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        """Stop serving and wait for the thread to end."""
        self._server.should_exit = True
        self._thread.join(timeout=10)
        if self._socket is not None:
            self._socket.close()

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
