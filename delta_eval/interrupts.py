"""Signals during a run: SIGTERM and SIGHUP stop it the way Ctrl-C does, and no signal cuts its last writes short.

A run stopped by Ctrl-C saves its finished pairs and ends its manifest as ``interrupted``. A service manager's
SIGTERM, or a closed terminal's SIGHUP, should do the same, not leave a session that looks killed. And a second
Ctrl-C, pressed while the run is saving, must not stop those writes half-way: it says the run is stopping, and
only a third one ends the process at once.

Example::

    async def main():
        with handle_signals():           # in the main thread, inside the running event loop
            await execute(config)        # whose closing writes run under deferred_signals()
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

__all__ = ["deferred_signals", "handle_signals"]

_STOP_SIGNALS = tuple(s for s in (getattr(signal, "SIGTERM", None), getattr(signal, "SIGHUP", None)) if s is not None)


_AGAIN = "signal once more to quit at once (pairs in flight are lost; finished batches are kept)"


class _State:
    count = 0
    closing = 0
    held: int | None = None
    installed = False


_state = _State()


@contextmanager
def handle_signals() -> Iterator[None]:
    """Route SIGINT, SIGTERM and SIGHUP through one handler while the block runs. The first does what Ctrl-C does
    (the task running the block is cancelled, which saves what finished and ends as ``interrupted``; the block
    then raises ``KeyboardInterrupt``); inside :func:`deferred_signals` it waits for the block's end. The second
    only says that the run is stopping; the third ends the process at once. A signal ignored when the block
    starts (``nohup``'s SIGHUP, SIGINT of a job started with ``&`` by a script) is left ignored. Does nothing off
    the main thread (only the main thread can handle signals) or outside a running event loop's task."""
    if threading.current_thread() is not threading.main_thread() or _state.installed:
        yield
        return
    try:
        loop, task = asyncio.get_running_loop(), asyncio.current_task()
    except RuntimeError:
        loop, task = None, None
    if loop is None or task is None:
        yield
        return
    cancelled = False

    def handler(signum: int, frame: FrameType | None) -> None:
        nonlocal cancelled
        _state.count += 1
        if _state.count >= 3:
            os._exit(
                128 + signum
            )  # asked three times: go now (committed batches are whole; the session reads as killed)
        if _state.closing:
            _state.held = signum
        elif _state.count == 1:
            # Cancel the run's task as asyncio's own Ctrl-C handler does. Not by raising KeyboardInterrupt here:
            # that lands anywhere (inside the loop's machinery, a task's step) and can leave a process that
            # never exits. Nor through asyncio's handler, which it does not install when SIGINT was ignored.
            if not task.done():
                cancelled = True
                task.cancel()
                loop.call_soon_threadsafe(lambda: None)  # wake the loop if it is waiting in select()
        else:
            # Not asyncio's second-signal KeyboardInterrupt, which lands anywhere and can leave tasks that never end.
            sys.stderr.write(f"\ndelta-eval: stopping, saving the finished pairs; {_AGAIN}\n")

    saved: dict[int, Any] = {}
    for s in (signal.SIGINT, *_STOP_SIGNALS):
        if signal.getsignal(s) is signal.SIG_IGN:
            continue  # ignored by whoever started us (nohup, a script's `cmd &`): theirs to decide, so left so
        saved[s] = signal.signal(s, handler)
    _state.installed, _state.count = True, 0
    try:
        yield
    except asyncio.CancelledError:
        if not cancelled:
            raise
        task.uncancel()  # our cancellation ends here: what leaves the block says why, as Ctrl-C would
        raise KeyboardInterrupt from None
    finally:
        for s, previous in saved.items():
            signal.signal(s, previous)
        _state.installed = False


@contextmanager
def deferred_signals() -> Iterator[None]:
    """Hold stop signals while the block runs (a run's closing writes); one that came is acted on after it, as a
    ``KeyboardInterrupt`` unless an exception is already on its way out."""
    _state.closing += 1
    leaving = False
    try:
        yield
    except BaseException:
        leaving = True
        raise
    finally:
        _state.closing -= 1
        held = _state.held
        if not _state.closing:
            _state.held = None
            if held is not None and not leaving:
                raise KeyboardInterrupt
