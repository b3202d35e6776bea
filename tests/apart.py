"""An executor whose shards act as if on machines apart from the session's and each other's, in this process: each
attempt in a working copy of its own (see :mod:`delta_eval.store.shard_copy`), numbered by a counter as the Ray
executor's actor numbers them."""

from __future__ import annotations

import threading
from collections.abc import Callable

from delta_eval.executors import InProcessExecutor

__all__ = ["Apart"]


class Apart(InProcessExecutor):
    """Two shards apart; the counter skips number ``skip`` as if an attempt killed before its upload had taken it."""

    def __init__(self, skip: int | None = None) -> None:
        super().__init__(2)
        self.skip = skip

    def batch_numbers(self) -> Callable[[int], int]:
        last = [0]
        lock = threading.Lock()

        def take(after: int) -> int:
            with lock:
                last[0] = max(last[0], after) + 1
                if last[0] == self.skip:
                    last[0] += 1
                return last[0]

        return take
