"""The streaming orchestration: source -> sample -> replay points -> replays -> judging -> run folder.

Stages run concurrently in one anyio task group and pass items through bounded memory object streams, so a slow
stage makes the earlier ones wait (backpressure) and memory stays flat however large the source is::

    load (1 task) --points--> replay (concurrency tasks) --pairs--> judge (judge_concurrency tasks) --> write (1 task)

The writer commits a batch every ``flush_every`` pairs (and at the end); a pair's rows always land in one batch.
Cancelling the run (Ctrl-C, a cancelled scope) commits the pairs already finished and marks the manifest
``interrupted``; a killed process loses at most the pairs of its last uncommitted batch, whose model calls are in
the response cache. Running again on the same folder resumes: finished pairs are skipped, nothing is written twice.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import anyio
import pyarrow as pa
import pyarrow.compute as pc
from anyio.abc import ObjectReceiveStream, ObjectSendStream

from delta_eval.adapters.base import ModelAdapter
from delta_eval.adapters.client import ModelClient
from delta_eval.adapters.limits import ModelLimiter
from delta_eval.adapters.registry import AdapterContext, create_adapter
from delta_eval.config import RunConfig
from delta_eval.exceptions import RunFolderError
from delta_eval.ingest.source import ConversationSource, open_source
from delta_eval.judges.cascade import JudgeCascade
from delta_eval.judges.resolve import resolve_equivalence_judge, resolve_pairwise_judge
from delta_eval.replay.engine import Replayer, recorded_replay
from delta_eval.replay.points import replay_points, select_turns
from delta_eval.replay.tools import RecordedToolSimulator, ToolSimulator
from delta_eval.sampling.population import build_population, iter_selected
from delta_eval.sampling.stratified import SampleResult, Stratified, draw_sample
from delta_eval.schema import Conversation, ErrorRecord, Replay, ReplayPoint, Side, Verdict
from delta_eval.store.cache import SQLiteCache
from delta_eval.store.folder import RunFolder
from delta_eval.store.tables import conversation_row, error_row, replay_row, verdict_row
from delta_eval.testing.recordings import RecordingIndex
from delta_eval.variant import Variant

__all__ = ["RunProgress", "execute"]

VerdictCallback = Callable[[Verdict], Awaitable[None] | None]


@dataclass
class RunProgress:
    """Live counters of a run, updated by the stages (a progress bar or a notebook can poll them)."""

    phase: str = "starting"
    read: int = 0
    read_errors: int = 0
    population: int = 0
    excluded: int = 0
    sampled: int = 0
    pairs_total: int = 0
    pairs_resumed: int = 0
    replayed: int = 0
    deterministic: int = 0
    equivalence: int = 0
    judged: int = 0
    failed: int = 0
    written: int = 0
    error_rows: int = 0

    @property
    def decided(self) -> int:
        """Pairs with a verdict in this session."""
        return self.deterministic + self.equivalence + self.judged + self.failed


@dataclass
class _Pair:
    point: ReplayPoint
    stratum: str
    weight: float
    baseline: Replay | None = None
    candidate: Replay | None = None
    errors: list[ErrorRecord] = field(default_factory=list)
    verdict: Verdict | None = None


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for pkg in (
        "delta-eval",
        "pydantic",
        "anyio",
        "pyarrow",
        "duckdb",
        "openai",
        "anthropic",
        "google-genai",
    ):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            continue
    return out


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _source_of(
    conversations: ConversationSource | Iterable[Conversation] | None, config: RunConfig
) -> ConversationSource:
    if conversations is None:
        if config.source is None:
            raise RunFolderError("no conversations given and the config has no [source]")
        return open_source(config.source)
    if isinstance(conversations, ConversationSource):
        return conversations
    return ConversationSource.from_conversations(conversations)


async def _replay_side(
    replayer: Replayer, point: ReplayPoint, side: Side, into: dict[Side, tuple[Replay, ErrorRecord | None]]
) -> None:
    into[side] = await replayer.replay(point, side)


class _Run:
    """One execution of a run configuration against a run folder."""

    def __init__(
        self,
        config: RunConfig,
        source: ConversationSource,
        *,
        tool_simulator: ToolSimulator | None,
        on_verdict: VerdictCallback | None,
        progress: RunProgress,
    ) -> None:
        self.config = config
        self.source = source
        self.progress = progress
        self.on_verdict = on_verdict
        self.folder = RunFolder(config.out)
        self.simulator = tool_simulator or RecordedToolSimulator(config.judges.match)
        self.recordings = RecordingIndex()
        self.done_pairs: set[str] = set()
        self.done_conversations: set[str] = set()
        self.population_committed = False
        self.manifest: dict[str, Any] = {}
        self._adapters: list[ModelAdapter] = []
        self._clients: dict[str, ModelClient] = {}
        self._client_variants: list[tuple[Variant, ModelClient]] = []
        # One limiter per model id: a provider's limits apply to the model, whichever variant calls it.
        self._limiters: dict[str, ModelLimiter] = {}
        self._since_commit = 0
        self._last_commit = time.monotonic()
        self._cache: SQLiteCache | None = None

    # -- folder and manifest ---------------------------------------------------------------------------------

    def open_folder(self) -> None:
        # A folder resumes only the same configuration on the same source.
        fingerprint = {**self.config.fingerprint(), "source_name": self.source.name}
        previous = self.folder.manifest()
        if previous is None:
            if self.folder.path.exists() and any(p for p in self.folder.path.iterdir() if p.name != "cache.sqlite"):
                raise RunFolderError(
                    f"{self.folder.path} exists and is not a delta_eval run folder; choose an empty or new 'out'"
                )
            sessions: list[dict[str, Any]] = []
        else:
            decided = set(self.folder.read("verdicts", ["pair_id"]).column("pair_id").to_pylist())
            if previous.get("fingerprint") != fingerprint:
                if decided:
                    raise RunFolderError(
                        f"{self.folder.path} holds a run with a different configuration; resume it with the same "
                        "configuration, or choose another 'out'"
                    )
                # Nothing was decided under the old configuration (it failed early): start afresh.
                self.folder.reset()
                sessions = []
            else:
                sessions = list(previous.get("sessions", []))
                for past in sessions:
                    if "ended_at" not in past:
                        # That process never got to record its end: it was killed (SIGKILL, power, OOM).
                        past["status"] = "killed"
                self.folder.recover()
                self.done_pairs = decided
                convs = self.folder.read("conversations", ["conversation_id"])
                self.done_conversations = set(convs.column("conversation_id").to_pylist())
                self.population_committed = any(c.get("kind") == "population" for c in self.folder.commits())
        self.progress.pairs_resumed = len(self.done_pairs)
        sessions.append({"started_at": _now(), "resumed_pairs": len(self.done_pairs)})
        self.manifest = {
            "format": "delta_eval.run/1",
            "status": "running",
            "fingerprint": fingerprint,
            "config": self.config.model_dump(mode="json"),
            "source": self.source.name,
            "baseline": self.config.baseline.describe(),
            "candidate": self.config.candidate.describe(),
            "seed": self.config.seed,
            "versions": _versions(),
            "started_at": (previous or {}).get("started_at", _now()),
            "sessions": sessions,
        }
        self.folder.write_manifest(self.manifest)

    def finish_manifest(self, status: str, started: float) -> dict[str, Any]:
        folder = self.folder
        verdicts = folder.read("verdicts", ["stage", "outcome", "conversation_id"])
        by_stage: dict[str, int] = {}
        by_outcome: dict[str, int] = {}
        for row in verdicts.to_pylist():
            by_stage[row["stage"]] = by_stage.get(row["stage"], 0) + 1
            by_outcome[row["outcome"]] = by_outcome.get(row["outcome"], 0) + 1
        errors = folder.read("errors", ["stage"])
        errors_by_stage: dict[str, int] = {}
        for stage in errors.column("stage").to_pylist():
            errors_by_stage[stage] = errors_by_stage.get(stage, 0) + 1
        cache = self._cache
        calls = {name: client.stats.model_dump() for name, client in self._clients.items()}
        session = self.manifest["sessions"][-1]
        session.update(
            {
                "ended_at": _now(),
                "status": status,
                "seconds": round(time.monotonic() - started, 3),
                "pairs_decided": self.progress.decided,
                "calls": calls,
                "cache": {"hits": cache.hits, "misses": cache.misses, "writes": cache.writes} if cache else {},
            }
        )
        totals: dict[str, int] = {}
        for past in self.manifest["sessions"]:
            for stats in past.get("calls", {}).values():
                for name, value in stats.items():
                    totals[name] = totals.get(name, 0) + value
        self.manifest.update(
            {
                "status": status,
                "ended_at": _now(),
                "counts": {
                    "read": self.progress.read,
                    "read_errors": self.progress.read_errors,
                    "population": self.progress.population,
                    "excluded_by_where": self.progress.excluded,
                    "sampled": self.progress.sampled,
                    "pairs_planned": self.progress.pairs_total,
                    "pairs": verdicts.num_rows,
                    "conversations_replayed": len(set(verdicts.column("conversation_id").to_pylist())),
                    "by_stage": by_stage,
                    "by_outcome": by_outcome,
                    "errors": errors.num_rows,
                    "errors_by_stage": errors_by_stage,
                    "calls": totals,
                },
            }
        )
        self.folder.write_manifest(self.manifest)
        return self.manifest

    # -- sampling --------------------------------------------------------------------------------------------

    def sample(self) -> SampleResult:
        spec = self.config.sample or Stratified()
        errors: list[ErrorRecord] = []
        max_turns = self.config.max_turns_per_conversation

        def n_pairs(conv: Conversation) -> int:
            n = sum(1 for _ in replay_points(conv))
            return n if max_turns is None else min(n, max_turns)

        population = build_population(self.source, spec, errors.append, counters={"n_pairs": n_pairs})
        result = draw_sample(population, spec)
        selected = set(result.selected)
        planned = pc.sum(
            population.filter(pc.is_in(population["position"], pa.array(sorted(selected), pa.int64())))["n_pairs"]
        ).as_py()
        # Records whose stratum function failed were read fine: they count as read, not as bad records.
        self.progress.read = population.num_rows + len(errors)
        self.progress.read_errors = sum(1 for e in errors if e.stage == "ingest")
        self.progress.population = result.population
        self.progress.excluded = result.excluded
        self.progress.sampled = len(result.selected)
        self.progress.pairs_total = int(planned or 0)
        if not self.population_committed:
            self.folder.add("errors", (error_row(e) for e in errors))
            self.folder.add("strata", (row.model_dump() for row in result.strata))
            self.folder.commit(note={"kind": "population"})
            self.progress.error_rows += len(errors)
        return result

    # -- models ----------------------------------------------------------------------------------------------

    def replayer_for(self, variant: Variant, cache: SQLiteCache) -> Replayer:
        c = self.config
        return Replayer(
            self.client_for(variant, cache), variant, self.simulator, c.max_tool_rounds, c.prices, self.source.name
        )

    def client_for(self, variant: Variant, cache: SQLiteCache) -> ModelClient:
        # One client per model and options: a model both sides use shares its client, limiter and statistics.
        for existing_variant, client in self._client_variants:
            if (existing_variant.model, existing_variant.provider_options) == (variant.model, variant.provider_options):
                return client
        adapter = create_adapter(variant.model, variant.provider_options, AdapterContext(recordings=self.recordings))
        self._adapters.append(adapter)
        limiters = self._limiters
        if variant.model not in limiters:
            limits = variant.limits
            limiters[variant.model] = ModelLimiter(
                limits.max_concurrency or adapter.max_concurrency,
                limits.requests_per_minute or adapter.requests_per_minute,
                adaptive=limits.adaptive,
            )
        client = ModelClient(adapter, limiters[variant.model], self.config.retry, cache)
        name = variant.model if variant.model not in self._clients else f"{variant.model} ({variant.name})"
        self._clients[name] = client
        self._client_variants.append((variant, client))
        return client

    # -- stages ----------------------------------------------------------------------------------------------

    async def load(self, sample: SampleResult, send: ObjectSendStream[_Pair], write: ObjectSendStream[Any]) -> None:
        async with send, write:
            iterator: Iterator[tuple[int, Conversation]] = iter(iter_selected(self.source, sample.selected))
            sentinel = (-1, None)
            while True:
                position, conv = await anyio.to_thread.run_sync(next, iterator, sentinel)
                if conv is None:
                    break
                stratum, weight = sample.selected[position]
                all_points = list(replay_points(conv))
                points = select_turns(all_points, self.config.max_turns_per_conversation, self.config.seed)
                # Subsampled turns stand for all of the conversation's turns.
                pair_weight = weight * (len(all_points) / len(points)) if points else weight
                self.recordings.add([conv])
                if conv.id not in self.done_conversations:
                    row = conversation_row(
                        conv,
                        position=position,
                        stratum=stratum,
                        weight=weight,
                        n_turns=len(all_points),
                        n_pairs=len(points),
                    )
                    await write.send(("conversation", row))
                for point in points:
                    if point.pair_id in self.done_pairs:
                        continue
                    await send.send(_Pair(point, stratum, pair_weight))

    async def replay(
        self,
        recv: ObjectReceiveStream[_Pair],
        send: ObjectSendStream[_Pair],
        baseline: Replayer,
        candidate: Replayer,
    ) -> None:
        async with recv, send:
            async for pair in recv:
                done: dict[Side, tuple[Replay, ErrorRecord | None]] = {}
                async with anyio.create_task_group() as tg:
                    tg.start_soon(_replay_side, baseline, pair.point, "baseline", done)
                    tg.start_soon(_replay_side, candidate, pair.point, "candidate", done)
                pair.baseline, pair.candidate = done["baseline"][0], done["candidate"][0]
                pair.errors.extend(error for _, error in done.values() if error is not None)
                self.progress.replayed += 1
                await send.send(pair)

    async def judge(
        self, recv: ObjectReceiveStream[_Pair], write: ObjectSendStream[Any], cascade: JudgeCascade
    ) -> None:
        async with recv, write:
            async for pair in recv:
                assert pair.baseline is not None and pair.candidate is not None
                verdict, errors = await cascade.decide(
                    pair.point, pair.baseline, pair.candidate, stratum=pair.stratum, weight=pair.weight
                )
                pair.verdict = verdict
                pair.errors.extend(errors)
                counter = {"deterministic": "deterministic", "equivalence": "equivalence", "judge": "judged"}
                attr = counter.get(verdict.stage, "failed")
                setattr(self.progress, attr, getattr(self.progress, attr) + 1)
                await write.send(("pair", pair))

    def _committed(self, batch: int | None) -> None:
        if batch is not None:
            self.progress.written += self._since_commit
            self._since_commit = 0
            self._last_commit = time.monotonic()

    async def write(self, recv: ObjectReceiveStream[Any]) -> None:
        try:
            async with recv:
                async for kind, item in recv:
                    if kind == "conversation":
                        self.folder.add("conversations", [item])
                        continue
                    pair: _Pair = item
                    assert pair.verdict is not None and pair.baseline is not None and pair.candidate is not None
                    self.folder.add(
                        "replays",
                        [replay_row(r) for r in (pair.baseline, pair.candidate, recorded_replay(pair.point))],
                    )
                    self.folder.add("verdicts", [verdict_row(pair.verdict)])
                    self.folder.add("errors", [error_row(e) for e in pair.errors])
                    self.progress.error_rows += len(pair.errors)
                    self._since_commit += 1
                    if self.on_verdict is not None:
                        out = self.on_verdict(pair.verdict)
                        if out is not None:
                            await out
                    if self._since_commit >= self.config.flush_every or time.monotonic() - self._last_commit > 5.0:
                        # Parquet encoding releases the GIL: on a thread, replays go on while a batch is written.
                        # Only this task adds rows, and it waits here, so the batch cannot change under the write.
                        self._committed(await anyio.to_thread.run_sync(self.folder.commit))
        finally:
            # Runs on cancellation too (synchronously, so it cannot be cancelled): keep every finished pair.
            self._committed(self.folder.commit())

    # -- the whole run ---------------------------------------------------------------------------------------

    async def execute(self) -> dict[str, Any]:
        started = time.monotonic()
        self.progress.phase = "reading"
        self.open_folder()
        status = "failed"
        try:
            sample = await anyio.to_thread.run_sync(self.sample)
            self._cache = SQLiteCache(self.config.cache_path)
            self.manifest["sessions"][-1]["cached_responses_at_start"] = len(self._cache)
            baseline = self.replayer_for(self.config.baseline, self._cache)
            candidate = self.replayer_for(self.config.candidate, self._cache)
            j = self.config.judges
            cascade = JudgeCascade(
                resolve_equivalence_judge(j.equivalence, j.match),
                resolve_pairwise_judge(j.judge, j.match),
                min_confidence=j.min_confidence,
                order=j.order,
                seed=self.config.seed,
                match=j.match,
            )
            self.progress.phase = "replaying"
            points_send, points_recv = anyio.create_memory_object_stream[_Pair](self.config.concurrency)
            pairs_send, pairs_recv = anyio.create_memory_object_stream[_Pair](self.config.judge_concurrency)
            write_send, write_recv = anyio.create_memory_object_stream[Any](self.config.flush_every)
            async with anyio.create_task_group() as tg:
                tg.start_soon(self.load, sample, points_send, write_send.clone())
                for _ in range(self.config.concurrency):
                    tg.start_soon(self.replay, points_recv.clone(), pairs_send.clone(), baseline, candidate)
                for _ in range(self.config.judge_concurrency):
                    tg.start_soon(self.judge, pairs_recv.clone(), write_send.clone(), cascade)
                tg.start_soon(self.write, write_recv)
                points_recv.close()
                pairs_send.close()
                pairs_recv.close()
                write_send.close()
            status = "completed"
        except anyio.get_cancelled_exc_class():
            status = "interrupted"
            raise
        except BaseException as exc:
            status = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
            raise
        finally:
            with anyio.CancelScope(shield=True):
                for adapter in self._adapters:
                    await adapter.aclose()
            self.progress.phase = status
            self.finish_manifest(status, started)
            if self._cache is not None:
                self._cache.close()
        return self.manifest


async def execute(
    config: RunConfig,
    conversations: ConversationSource | Iterable[Conversation] | None = None,
    *,
    tool_simulator: ToolSimulator | None = None,
    on_verdict: VerdictCallback | None = None,
    progress: RunProgress | None = None,
) -> dict[str, Any]:
    """Run (or resume) ``config`` and return the final manifest.

    ``conversations`` overrides ``config.source``. ``on_verdict`` is called with each verdict as its pair is
    written; ``progress`` receives live counters.
    """
    # Validate again: a config changed with model_copy(update=...) skipped validation (and side naming).
    config = RunConfig.model_validate(dict(config))
    source = _source_of(conversations, config)
    run = _Run(
        config,
        source,
        tool_simulator=tool_simulator,
        on_verdict=on_verdict,
        progress=progress or RunProgress(),
    )
    return await run.execute()
