"""A run's event loop runs with fewer garbage collections, and the application's thresholds come back after it,
also when runs overlap."""

from __future__ import annotations

import gc
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
