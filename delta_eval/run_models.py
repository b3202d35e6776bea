"""The models of one process of a run: one :class:`~delta_eval.adapters.pool.ModelPool` for both sides and the
judges, a :class:`~delta_eval.replay.engine.Replayer` per side, and the judge cascade.

Built the same way by a one-process run (:mod:`delta_eval.runner`) and by each shard of a sharded one
(:mod:`delta_eval.executors`), so that both make the same requests, keyed the same in the response cache.
"""

from __future__ import annotations

from dataclasses import dataclass

from delta_eval.adapters.pool import LimiterFactory, ModelPool, local_limiter
from delta_eval.adapters.recordings import RecordingIndex
from delta_eval.adapters.registry import AdapterContext
from delta_eval.calls import split_model_id
from delta_eval.config import RunConfig
from delta_eval.judges.cascade import JudgeCascade
from delta_eval.judges.config import build_cascade
from delta_eval.judges.context import JudgeContext
from delta_eval.judges.session import SESSION_RUBRIC
from delta_eval.replay.engine import Replayer
from delta_eval.replay.tools import RecordedToolSimulator, ToolSimulator

__all__ = ["RunModels", "build_models"]


@dataclass
class RunModels:
    """What replays and judges a run's pairs in one process; :meth:`aclose` closes the pool's adapters."""

    pool: ModelPool
    sides: dict[str, Replayer]
    cascade: JudgeCascade
    #: The recorded answers the simulated model replays (``None``: no side uses it).
    recordings: RecordingIndex | None

    async def aclose(self) -> None:
        """Close every adapter."""
        await self.pool.aclose()


async def build_models(
    c: RunConfig,
    source_name: str,
    tool_simulator: ToolSimulator | None = None,
    *,
    limiters: LimiterFactory = local_limiter,
) -> RunModels:
    """Every model's client and the judges of config ``c``: an unknown model, a missing SDK or key, or bad provider
    options raise here, before anything is written (the adapters built so far are closed)."""
    models = [v.model for v in c.sides().values()]
    if c.mode == "session":  # the user (and tool) simulators may be simulated models too
        models += [m for m in (c.session.user, c.session.tool_model) if m is not None]
    simulated = any(split_model_id(m)[0] == "simulated" for m in models)
    recordings = RecordingIndex() if simulated else None
    context = AdapterContext(recordings=recordings, models=c.models)
    pool = ModelPool(None, c.retry, context, batch=c.batch, limiters=limiters)
    batch_replays = c.batch is not None and c.batch.replays
    try:
        simulator = tool_simulator or RecordedToolSimulator(c.judges.match)
        sides: dict[str, Replayer] = {
            side: Replayer(
                pool.client(v.model, v.provider_options, v.limits, label=v.name, batch=batch_replays),
                v,
                simulator,
                c.max_tool_rounds,
                c.all_prices,
                source_name,
                c.judges.match,
            )
            for side, v in c.sides().items()
        }
        # Whole sessions are judged on what they did for the customer (a judge given no rubric of its own).
        rubric = SESSION_RUBRIC if c.mode == "session" else None
        judging = JudgeContext(pool=pool, prices=c.all_prices, seed=c.seed, match=c.judges.match, rubric=rubric)
        cascade = build_cascade(c.judges, judging)
    except BaseException:
        await pool.aclose()
        raise
    return RunModels(pool, sides, cascade, recordings)
