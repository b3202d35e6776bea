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
"""

from delta_eval.executors.base import Executor, Shard, ShardReport
from delta_eval.executors.local import InProcessExecutor, ProcessExecutor, ShardFailedError
from delta_eval.executors.ray_cluster import RayExecutor

__all__ = [
    "Executor",
    "InProcessExecutor",
    "ProcessExecutor",
    "RayExecutor",
    "Shard",
    "ShardFailedError",
    "ShardReport",
]
