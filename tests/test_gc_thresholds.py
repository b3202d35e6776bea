"""A run's event loop runs with fewer garbage collections, and the application's thresholds come back after it,
also when runs overlap."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from delta_eval.gc_thresholds import RUN_THRESHOLDS, fewer_collections
from delta_eval.sync import run_loop


@pytest.fixture
def app_thresholds() -> Iterator[None]:
    before = gc.get_threshold()
    gc.set_threshold(900, 11, 12)
    yield
    gc.set_threshold(*before)


@pytest.mark.usefixtures("app_thresholds")
def test_a_run_loop_collects_less_and_restores_the_applications_thresholds() -> None:
    async def thresholds() -> tuple[int, ...]:
        return tuple(gc.get_threshold())

    assert run_loop(thresholds) == (RUN_THRESHOLDS[0], RUN_THRESHOLDS[1], 12)  # the larger of each pair
    assert gc.get_threshold() == (900, 11, 12)


@pytest.mark.usefixtures("app_thresholds")
def test_overlapping_runs_restore_once_the_last_one_ends() -> None:
    first, second = fewer_collections(), fewer_collections()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert gc.get_threshold()[0] == RUN_THRESHOLDS[0]  # the second run still runs
    second.__exit__(None, None, None)
    assert gc.get_threshold() == (900, 11, 12)


def test_a_source_read_on_two_threads_at_once_leaves_the_collector_on(monkeypatch: pytest.MonkeyPatch) -> None:
    # The interleaving that left it off: B looks while A's pause holds the collector off, A's pause ends, then B
    # pauses (and, having seen it off, never switched it back on).
    from delta_eval.ingest.source import _collector_paused

    a_inside, a_may_end, a_ended = threading.Event(), threading.Event(), threading.Event()
    b: dict[str, threading.Thread] = {}
    real_disable = gc.disable

    def disable() -> None:
        if threading.current_thread() is b.get("thread"):
            a_may_end.set()  # A ends its pause between B's look and B's pause
            a_ended.wait(2)  # (a pause under a lock keeps A waiting instead: then it ends after B)
        real_disable()

    def a_items() -> Iterator[int]:
        a_inside.set()
        a_may_end.wait(5)
        yield 1

    def a() -> None:
        for _ in _collector_paused(a_items()):
            a_ended.set()

    def b_reads() -> None:
        for _ in _collector_paused(iter([1])):
            pass
        a_may_end.set()

    monkeypatch.setattr(gc, "disable", disable)
    assert gc.isenabled()
    first = threading.Thread(target=a)
    first.start()
    assert a_inside.wait(5)
    b["thread"] = threading.Thread(target=b_reads)
    b["thread"].start()
    first.join(10)
    b["thread"].join(10)
    on = gc.isenabled()
    gc.enable()
    assert on
