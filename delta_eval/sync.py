"""Running a coroutine to completion from synchronous code, also where an event loop is already running (Jupyter):
there it gets a thread and a loop of its own.

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

__all__ = ["run_sync"]

T = TypeVar("T")


def run_sync(main: Callable[[], Awaitable[T]]) -> T:
    """``anyio.run(main)``, or the same on a thread when this thread already runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return anyio.run(main)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = anyio.run(main)
        except BaseException as exc:
            box["error"] = exc

    worker = threading.Thread(target=target, name="delta-eval-run")
    worker.start()
    worker.join()
    if "error" in box:
        raise box["error"]
    result: T = box["result"]
    return result
