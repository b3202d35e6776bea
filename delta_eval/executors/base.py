"""What a sharded run hands to its executor: the sample cut into shards by conversation, and what each shard
reports back.

A shard is a set of whole conversations: every turn of a conversation, the baseline's replay of each point and the
judging of each of its pairs happen in one shard, so no request is made by two shards (the shards share the run's
response cache as well, so a shard retried after its worker was killed is answered from it). The conversations are
dealt to the shards by the model calls their replays make if they do what was recorded (the largest first, each
to the shard with the fewest so far), which the sample fixes, so the cut is the same on every rerun.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from delta_eval.adapters.limits import Limiter, ModelLimiter, ModelLimits
from delta_eval.adapters.pool import LimiterFactory, local_limiter
from delta_eval.calls import CallStats
from delta_eval.config import RunConfig
from delta_eval.replay.tools import ToolSimulator
from delta_eval.sampling.stratified import SampleResult
from delta_eval.schema import Conversation
from delta_eval.store.manifest import RunManifest

__all__ = ["COUNTERS", "Executor", "Shard", "ShardReport", "SplitLimiters", "deal", "shard_config"]

#: The counters of :class:`~delta_eval.progress.RunProgress` a shard reports and the run adds up.
COUNTERS = ("replayed", "deterministic", "equivalence", "judge", "error", "written", "error_rows", "input_tokens",
            "output_tokens")  # fmt: skip


@dataclass
class Shard:
    """One shard of a sharded session: its conversations (read once by the session, at their positions in the
    source) and the sample restricted to them, with what every shard shares: the run's configuration (its
    concurrency already cut to the shard's share), the session's number and manifest, the folder's header."""

    index: int
    config: RunConfig
    sample: SampleResult
    conversations: list[tuple[int, Conversation]]
    source_name: str
    session: int
    manifest: RunManifest
    header: dict[str, Any]
    tool_simulator: ToolSimulator | None = None
    #: Makes each model's limiter in the shard's process (set by the executor).
    limiters: LimiterFactory = local_limiter
    #: Numbers the shard's batches when it works in a working copy of its own (:meth:`Executor.batch_numbers`):
    #: called with the highest number the copy holds, it returns one no other shard takes.
    numbers: Callable[[int], int] | None = None


@dataclass
class ShardReport:
    """What one shard did: its counters (:data:`COUNTERS`), spend, calls by model, response-cache use, notes."""

    index: int
    counters: dict[str, int] = field(default_factory=dict)
    cost_usd: float | None = 0.0
    calls: dict[str, CallStats] = field(default_factory=dict)
    cache: tuple[int, int, int] = (0, 0, 0)  # hits, misses, writes
    notes: list[str] = field(default_factory=list)


class Executor(ABC):
    """Runs the shards of a session somewhere: in this process (:class:`~delta_eval.executors.InProcessExecutor`),
    in a process per core (:class:`~delta_eval.executors.ProcessExecutor`), or as tasks of a Ray cluster
    (:class:`~delta_eval.executors.RayExecutor`). Every executor runs the same shard code
    (:func:`~delta_eval.executors.shard.run_shard`)."""

    @abstractmethod
    def shard_count(self) -> int:
        """How many shards to cut the session into (at least one)."""

    def prepare(self, config: RunConfig | None = None) -> None:  # noqa: B027 - optional hook, most start nothing early
        """Start what the shards of ``config`` will run on, while the session samples (the session calls it once its
        models are built, before it samples). Nothing by default."""

    def release(self) -> None:  # noqa: B027 - optional hook, as prepare
        """End what :meth:`prepare` started that :meth:`run` did not use (the session ended before its shards
        ran). Nothing by default."""

    def batch_numbers(self) -> Callable[[int], int] | None:
        """How the shards of a run in an object store number their batches when they may run on machines that
        share no file system with the session: each shard then works in a working copy of its own (see
        :mod:`delta_eval.store.shard_copy`). ``None`` (the default): every shard writes the session's folder."""
        return None

    @abstractmethod
    async def run(self, shards: list[Shard], limits: dict[str, ModelLimits]) -> list[ShardReport]:
        """Run every shard to its end and return their reports; ``limits`` are each model's limits for the whole
        run, which the executor keeps global (one limiter for every shard, or each shard its share)."""


def shard_config(config: RunConfig, shards: int) -> RunConfig:
    """The configuration each of ``shards`` shards runs: its share of the pairs replayed and judged at once."""
    share = {
        "concurrency": max(1, math.ceil(config.concurrency / shards)),
        "judge_concurrency": max(1, math.ceil(config.judge_concurrency / shards)),
    }
    return config.model_copy(update=share)


def deal(sizes: dict[int, int], shards: int) -> list[list[int]]:
    """Positions of conversations dealt to ``shards`` shards by their ``sizes`` (the session gives their recorded
    model calls): the largest first, each to the shard with the least so far (the lowest index on a tie); each
    shard's positions in order.

    Example:
        >>> deal({0: 5, 1: 1, 2: 3, 3: 3}, 2)
        [[0, 1], [2, 3]]
    """
    load = [0] * shards
    out: list[list[int]] = [[] for _ in range(shards)]
    for position, size in sorted(sizes.items(), key=lambda kv: (-kv[1], kv[0])):
        k = min(range(shards), key=lambda i: (load[i], i))
        out[k].append(position)
        load[k] += size
    return [sorted(positions) for positions in out]


@dataclass(frozen=True)
class SplitLimiters:
    """Each of ``shards`` processes holds a limiter of its own with its share of every model's limits: together
    they stay within the model's limits without talking to each other (adaptive concurrency then adapts per
    process)."""

    shards: int

    def __call__(self, model: str, limits: ModelLimits) -> Limiter:
        assert limits.max_concurrency is not None
        rpm = limits.requests_per_minute / self.shards if limits.requests_per_minute else None
        return ModelLimiter(max(1, limits.max_concurrency // self.shards), rpm, adaptive=limits.adaptive)
