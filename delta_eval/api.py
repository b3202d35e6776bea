"""The entry points: :func:`run` (blocking), :func:`arun` (async) and :func:`stream` (verdicts as they complete).

Each takes a :class:`~delta_eval.config.RunConfig` (or a TOML/YAML path) or builds one from keyword arguments.

Example:
    >>> import delta_eval as de                                                   # doctest: +SKIP
    >>> convs = de.read_conversations("export.jsonl", metadata=["tier"])         # doctest: +SKIP
    >>> result = de.run(conversations=convs,                                      # doctest: +SKIP
    ...                 baseline=de.Variant(model="openai:gpt-4o"),
    ...                 candidate=de.Variant(model="openai:gpt-4.1"),
    ...                 sample=de.Stratified(by=["tier"], n=200, seed=1), out="runs/gpt-4.1")
    >>> print(result.win_rate())                                                  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio
from pydantic import ValidationError

from delta_eval.config import RunConfig, load_config
from delta_eval.exceptions import ConfigError
from delta_eval.executors import Executor
from delta_eval.ingest.source import ConversationSource
from delta_eval.interrupts import handle_signals
from delta_eval.progress import RunProgress
from delta_eval.redact import describe_invalid
from delta_eval.replay.tools import ToolSimulator
from delta_eval.result import RunResult
from delta_eval.runner import execute
from delta_eval.schema import Conversation, Verdict
from delta_eval.sync import run_sync

__all__ = ["VerdictStream", "arun", "make_config", "run", "stream"]

Conversations = ConversationSource | Iterable[Conversation] | None


def make_config(config: RunConfig | str | Path | None = None, **options: Any) -> RunConfig:
    """A :class:`RunConfig` from a config object or file, with keyword arguments replacing its fields.

    Without ``out``, the run goes to ``runs/run-YYYYmmdd-HHMMSS``.
    """
    options = {k: v for k, v in options.items() if v is not None}
    if isinstance(config, str | Path):
        return load_config(config, **options)
    try:
        if isinstance(config, RunConfig):
            data = {**dict(config), **options}
            return RunConfig.model_validate(data)
        if "out" not in options:
            options["out"] = Path("runs") / datetime.now(UTC).strftime("run-%Y%m%d-%H%M%S")
        return RunConfig(**options)
    except ValidationError as exc:
        raise ConfigError(describe_invalid(exc)) from None


async def arun(
    config: RunConfig | str | Path | None = None,
    *,
    conversations: Conversations = None,
    tool_simulator: ToolSimulator | None = None,
    progress: RunProgress | None = None,
    executor: Executor | None = None,
    **options: Any,
) -> RunResult:
    """Run a delta evaluation and return its :class:`RunResult` (async form of :func:`run`)."""
    cfg = make_config(config, **options)
    await execute(cfg, conversations, tool_simulator=tool_simulator, progress=progress, executor=executor)
    return RunResult(cfg.out)


def run(
    config: RunConfig | str | Path | None = None,
    *,
    conversations: Conversations = None,
    tool_simulator: ToolSimulator | None = None,
    progress: RunProgress | bool = True,
    progress_every: float = 10.0,
    executor: Executor | None = None,
    **options: Any,
) -> RunResult:
    """Run a delta evaluation to the end and return its :class:`RunResult`.

    Keyword arguments are :class:`RunConfig` fields (``baseline``, ``candidate``, ``sample``, ``out``, ...).
    Running again with the same ``out`` and configuration resumes: finished pairs are kept, cached calls are not
    paid again. Works inside Jupyter's running event loop (the run gets a thread of its own).

    Progress is shown by default (``progress=False``: nothing): a live bar on a terminal, an output updated in place
    in Jupyter, and elsewhere (CI, logs, a captured stderr) a plain line on stderr every ``progress_every`` seconds
    and one at the end: pairs done of the total, per-stage counts, model calls, retries and rate-limited answers,
    tokens, cost so far and the ETA (see :mod:`delta_eval.display`). A :class:`RunProgress` of yours receives the
    live counters (and the display shows them too).

    ``executor`` shards the pairs by conversation over every core (:class:`ProcessExecutor`) or a Ray cluster
    (:class:`RayExecutor`), with the same verdicts as a run in this process (see :mod:`delta_eval.executors`);
    a sharded run's counters are added up live, as its shards publish them (every second), and exactly as they end.
    """
    if progress_every <= 0:
        raise ConfigError(f"progress_every must be a number of seconds above 0, got {progress_every!r}")
    cfg = make_config(config, **options)
    tracker = progress if isinstance(progress, RunProgress) else RunProgress()

    async def main() -> RunResult:
        with handle_signals():  # SIGTERM / SIGHUP stop the run as Ctrl-C does: finished pairs are saved
            return await arun(
                cfg, conversations=conversations, tool_simulator=tool_simulator, progress=tracker, executor=executor
            )

    if progress is False:
        return run_sync(main)
    from delta_eval.display import progress_display

    with progress_display(tracker, every=progress_every):
        return run_sync(main)


class VerdictStream:
    """Verdicts of a run as their pairs are written. Use as ``async with`` (or just ``async for``).

    Example::

        async with de.stream(config) as verdicts:
            async for v in verdicts:
                print(v.pair_id, v.stage, v.outcome)

    Leaving the block early cancels the run; what finished is kept and the folder can be resumed.
    """

    def __init__(self, config: RunConfig, conversations: Conversations, tool_simulator: ToolSimulator | None) -> None:
        self.config = config
        self.progress = RunProgress()
        self._conversations = conversations
        self._tool_simulator = tool_simulator
        self._send, self._recv = anyio.create_memory_object_stream[Verdict](64)
        self._tg: Any = None
        self._finished = False
        self.result: RunResult | None = None

    async def __aenter__(self) -> VerdictStream:
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(self._run)
        return self

    async def _run(self) -> None:
        async with self._send:
            await execute(
                self.config,
                self._conversations,
                tool_simulator=self._tool_simulator,
                on_verdict=self._send.send,
                progress=self.progress,
            )
        self.result = RunResult(self.config.out)
        self._finished = True

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        if exc_type is not None or not self._finished:
            self._tg.cancel_scope.cancel()
        self._recv.close()
        return await self._tg.__aexit__(exc_type, exc, tb)  # type: ignore[no-any-return]

    def __aiter__(self) -> AsyncIterator[Verdict]:
        if self._tg is None:
            return self._standalone()
        return self._recv.__aiter__()

    async def _standalone(self) -> AsyncIterator[Verdict]:
        async with self:
            async for verdict in self._recv:
                yield verdict


def stream(
    config: RunConfig | str | Path | None = None,
    *,
    conversations: Conversations = None,
    tool_simulator: ToolSimulator | None = None,
    **options: Any,
) -> VerdictStream:
    """Run a delta evaluation, yielding each :class:`Verdict` as soon as its pair is written.

    After the stream is exhausted, ``.result`` holds the :class:`RunResult`.
    """
    return VerdictStream(make_config(config, **options), conversations, tool_simulator)
