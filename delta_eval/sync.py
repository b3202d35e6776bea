"""Running a coroutine to completion from synchronous code, also where an event loop is already running (Jupyter):
there it gets a thread and a loop of its own. The loop is uvloop's where uvloop is installed (the ``fast`` extra):
its loop, written in Cython on libuv, costs less CPU per socket operation and callback than asyncio's, and a run at
hundreds of calls in flight spends a fair share of its client CPU there. The garbage collector runs less often
meanwhile (:mod:`delta_eval.gc_thresholds`).

Example:
    >>> async def answer() -> int:
    ...     return 42
    >>> run_sync(answer)
    42
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio

from delta_eval.gc_thresholds import fewer_collections
from delta_eval.installed import installed

__all__ = ["new_event_loop", "run_loop", "run_sync"]

T = TypeVar("T")


def run_loop(main: Callable[[], Awaitable[T]]) -> T:
    """``anyio.run(main)`` on asyncio, with uvloop's event loop where uvloop is installed, and fewer garbage
    collections while it runs (:func:`~delta_eval.gc_thresholds.fewer_collections`)."""
    with fewer_collections():
        return anyio.run(main, backend_options={"use_uvloop": installed("uvloop")})


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A new event loop for a thread of its own (a fake provider's server): uvloop's where installed, as
    :func:`run_loop` runs on."""
    if installed("uvloop"):
        import uvloop

        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def run_sync(main: Callable[[], Awaitable[T]]) -> T:
    """:func:`run_loop`, or the same on a thread when this thread already runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return run_loop(main)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = run_loop(main)
        except BaseException as exc:
            box["error"] = exc

    worker = threading.Thread(target=target, name="delta-eval-run")
    worker.start()
    worker.join()
    if "error" in box:
        raise box["error"]
    result: T = box["result"]
    return result
