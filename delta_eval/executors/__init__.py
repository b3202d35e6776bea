"""Where a run's pairs are replayed and judged: in this process (the default, no executor), or sharded by
conversation over processes on this machine or the nodes of a Ray cluster.

A sharded session draws the sample once, in the session's process, which also writes the population's rows and the
manifest (once); the executor runs the shards, each with its own event loop, models and judges, committing its own
batches into the run folder (see :mod:`delta_eval.executors.shard`). The verdicts are those of a one-process run of
the same configuration: the same sample, the same replay points, the same seeds per pair and the same cache keys.

Example::

    de.run(config, executor=de.ProcessExecutor())                       # every core of this machine
    de.run(config, executor=de.RayExecutor(address="10.0.0.5:6379"))    # a Ray cluster
    de.run(config, out="s3://evals/run", executor=de.RayExecutor(...))  # its nodes sharing no file system

The names are imported on first use: a process that needs one module of the package (a Ray actor of a run needs
only its limiters, :mod:`~delta_eval.executors.ray_actors`) does not import the shards' code with it.
"""

import typing as _typing

from delta_eval.lazy import lazy_names as _lazy_names

if _typing.TYPE_CHECKING:
    from delta_eval.executors.base import Executor, Shard, ShardReport
    from delta_eval.executors.local import InProcessExecutor, ProcessExecutor, ShardFailedError
    from delta_eval.executors.ray_cluster import RayExecutor

_EXPORTS = {
    "delta_eval.executors.base": ("Executor", "Shard", "ShardReport"),
    "delta_eval.executors.local": ("InProcessExecutor", "ProcessExecutor", "ShardFailedError"),
    "delta_eval.executors.ray_cluster": ("RayExecutor",),
}
if not _typing.TYPE_CHECKING:  # hidden from type checkers, so that a misspelt name stays an error for them
    __getattr__, __dir__ = _lazy_names(__name__, _EXPORTS)

__all__ = [
    "Executor",
    "InProcessExecutor",
    "ProcessExecutor",
    "RayExecutor",
    "Shard",
    "ShardFailedError",
    "ShardReport",
]
